/**
 * Playwright configuration for the jupyter-edt Galata UI tests.
 *
 * Runs headless against the system Chromium (Playwright's own browser downloads
 * are not needed: install with PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1) and starts a
 * throw-away JupyterLab from the project's virtual environment.
 *
 * Environment (all optional):
 *   CHROMIUM_PATH     Chromium/Chrome executable (default: /usr/bin/chromium,
 *                     then chromium-browser / google-chrome on PATH)
 *   EDT_UI_PORT       port of the test server at the root URL (default 18888)
 *   EDT_UI_BASE_URL   base URL of the second test server, which runs the
 *                     sidebar test again below it (default /jupyter-edt-ui/;
 *                     '' or / skips that server)
 *   EDT_UI_BASE_URL_PORT  port of that second server (default EDT_UI_PORT + 1)
 *   EDT_VIRTUAL_GPUS  virtual GPU count given to the servers (default 4)
 *   EDT_JUPYTER       `jupyter` executable (default ../.venv/bin/jupyter, then PATH)
 *   EDT_UI_REUSE_SERVER=1  reuse a server already listening on EDT_UI_PORT
 */
const fs = require('fs');
const path = require('path');
const baseConfig = require('@jupyterlab/galata/lib/playwright-config');

function findExecutable(candidates) {
  for (const candidate of candidates) {
    if (!candidate) {
      continue;
    }
    if (candidate.includes(path.sep)) {
      if (fs.existsSync(candidate)) {
        return candidate;
      }
      continue;
    }
    for (const dir of (process.env.PATH || '').split(path.delimiter)) {
      const full = path.join(dir, candidate);
      if (dir && fs.existsSync(full)) {
        return full;
      }
    }
  }
  return undefined;
}

const chromiumPath =
  process.env.CHROMIUM_PATH ||
  findExecutable([
    '/usr/bin/chromium',
    'chromium',
    'chromium-browser',
    'google-chrome'
  ]);

const jupyter =
  process.env.EDT_JUPYTER ||
  findExecutable([path.resolve(__dirname, '..', '.venv', 'bin', 'jupyter')]) ||
  'jupyter';

// Two throw-away servers: one at the root URL (all tests) and one below a
// non-root base URL, as behind JupyterHub (the sidebar test only; Galata's
// `tmpPath` folder upload does not support a base URL, so specs that run
// there navigate themselves with `autoGoto: false`).
const port = Number(process.env.EDT_UI_PORT || 18888);
const basePath = (process.env.EDT_UI_BASE_URL ?? '/jupyter-edt-ui/').replace(
  /^\/+|\/+$/g,
  ''
);
const baseUrlPort = Number(process.env.EDT_UI_BASE_URL_PORT || port + 1);

const quote = s => `'${String(s).replace(/'/g, `'\\''`)}'`;

// A third: a real JupyterHub whose users' servers forward to `jupyter edt serve`
// (hub_server.py), for hub.spec.ts only; EDT_UI_HUB_PORT=0 skips it.
const hubPort = Number(process.env.EDT_UI_HUB_PORT ?? port + 2);
const python =
  process.env.EDT_PYTHON ||
  findExecutable([path.resolve(__dirname, '..', '.venv', 'bin', 'python')]) ||
  'python3';

const artifactsDir = path.join(__dirname, 'artifacts');
fs.mkdirSync(artifactsDir, { recursive: true });

const servers = [
  { project: 'lab', port, basePath: '', log: 'jupyter-server.log' },
  ...(basePath
    ? [
        {
          project: 'lab-base-url',
          port: baseUrlPort,
          basePath,
          log: 'jupyter-server-base-url.log',
          testMatch: /(sidebar|jobs)\.spec\.ts$/
        }
      ]
    : []),
  ...(hubPort
    ? [
        {
          project: 'lab-hub',
          port: hubPort,
          basePath: 'user/alice-ui',
          log: 'jupyterhub.log',
          testMatch: /hub\.spec\.ts$/,
          command: `${quote(python)} hub_server.py`,
          url: `http://127.0.0.1:${hubPort}/hub/login`
        }
      ]
    : [])
].map(server => ({
  ...server,
  baseUrlPath: server.basePath ? `/${server.basePath}/` : '/',
  // Galata joins baseURL and appPath ('/lab') itself: no trailing slash here.
  baseURL: `http://127.0.0.1:${server.port}${
    server.basePath ? `/${server.basePath}` : ''
  }`,
  logPath: path.join(artifactsDir, server.log)
}));

// Keep the user's own Jupyter config/data/runtime out of the test servers; the
// extension is still found through the environment's sys-prefix paths
// (etc/jupyter/jupyter_server_config.d, share/jupyter/labextensions).
const jupyterHome = path.join(__dirname, '.jupyter-test');
const jupyterEnv = {
  JUPYTER_CONFIG_DIR: path.join(jupyterHome, 'config'),
  JUPYTER_DATA_DIR: path.join(jupyterHome, 'data'),
  JUPYTER_RUNTIME_DIR: path.join(jupyterHome, 'runtime'),
  JUPYTER_PLATFORM_DIRS: '1'
};

module.exports = {
  ...baseConfig,
  testDir: './tests',
  outputDir: './test-results',
  // Two CPU cores: one browser at a time, generous but bounded timeouts.
  workers: 1,
  fullyParallel: false,
  forbidOnly: !!process.env.CI,
  retries: 0,
  timeout: 120 * 1000,
  expect: { timeout: 30 * 1000 },
  globalSetup: require.resolve('./global-setup'),
  reporter: [
    ['./server-log-reporter.js'],
    ['list'],
    ['html', { open: 'never', outputFolder: 'playwright-report' }]
  ],
  use: {
    ...baseConfig.use,
    headless: true,
    viewport: { width: 1280, height: 800 },
    actionTimeout: 30 * 1000,
    navigationTimeout: 60 * 1000,
    trace: 'retain-on-failure',
    video: 'off',
    screenshot: 'only-on-failure',
    launchOptions: {
      executablePath: chromiumPath,
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-dev-shm-usage',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        '--disable-quic',
        '--no-first-run'
      ]
    }
  },
  projects: servers.map(server => ({
    name: server.project,
    ...(server.testMatch
      ? { testMatch: server.testMatch }
      : { testIgnore: /hub\.spec\.ts$/ }),
    use: { baseURL: server.baseURL }
  })),
  // Each server's log goes to artifacts/<log> (server-log-reporter.js prints
  // its tail when the run fails), so Playwright's summary stays last.
  webServer: servers.map(server => ({
    name: server.project,
    command:
      (server.command ??
        `${quote(jupyter)} lab --config jupyter_server_test_config.py` +
          ` --ServerApp.port=${server.port}` +
          ` --ServerApp.base_url=${quote(server.baseUrlPath)}`) +
      ` > ${quote(server.logPath)} 2>&1`,
    cwd: __dirname,
    env: {
      ...process.env,
      ...jupyterEnv,
      EDT_UI_PORT: String(server.port),
      EDT_UI_BASE_URL: server.baseUrlPath
    },
    url: server.url ?? `${server.baseURL}/lab`,
    timeout: 180 * 1000,
    reuseExistingServer: process.env.EDT_UI_REUSE_SERVER === '1',
    gracefulShutdown: { signal: 'SIGTERM', timeout: 10 * 1000 }
  }))
};
