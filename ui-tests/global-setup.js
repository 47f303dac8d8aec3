/**
 * Playwright global setup: drop screenshots left by an earlier run, so that
 * artifacts/ only holds what this run produced.  (The Jupyter server log in
 * the same folder is already being written by the web server: keep it.)
 */
const fs = require('fs');
const path = require('path');

module.exports = async () => {
  const dir = path.join(__dirname, 'artifacts');
  fs.mkdirSync(dir, { recursive: true });
  for (const name of fs.readdirSync(dir)) {
    if (name.endsWith('.png')) {
      fs.rmSync(path.join(dir, name), { force: true });
    }
  }
};
