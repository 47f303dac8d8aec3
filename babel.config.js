// Babel transforms the ES-module JavaScript of JupyterLab's packages for jest.
module.exports = require('@jupyterlab/testing/lib/babel-config').default;
