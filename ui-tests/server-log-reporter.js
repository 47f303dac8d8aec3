/**
 * Playwright reporter: when the run did not pass, print the end of the test
 * Jupyter servers' logs (artifacts/jupyter-server*.log).  It is listed before
 * the `list` reporter, so Playwright's summary still ends the output.
 */
const fs = require('fs');
const path = require('path');

const ARTIFACTS = path.join(__dirname, 'artifacts');
const LINES = Number(process.env.EDT_UI_SERVER_LOG_LINES || 40);

class ServerLogReporter {
  printsToStdio() {
    return false;
  }

  onEnd(result) {
    if (result.status === 'passed' || !fs.existsSync(ARTIFACTS)) {
      return;
    }
    const logs = fs
      .readdirSync(ARTIFACTS)
      .filter(name => /^jupyter-server.*\.log$/.test(name))
      .sort();
    for (const name of logs) {
      const log = path.join(ARTIFACTS, name);
      const lines = fs.readFileSync(log, 'utf-8').trimEnd().split('\n');
      const shown = lines.slice(-LINES);
      process.stdout.write(
        `\n--- last ${shown.length} lines of ${path.relative(
          process.cwd(),
          log
        )} ---\n${shown.join('\n')}\n--- end of ${name} ---\n`
      );
    }
  }
}

module.exports = ServerLogReporter;
