// ESLint flat config: typescript-eslint for the sources and tests, Node
// globals for the CommonJS config files; formatting is left to prettier.
import js from '@eslint/js';
import prettier from 'eslint-config-prettier';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      '**/node_modules/',
      '**/lib/',
      '**/coverage/',
      '.venv/',
      '**/.jupyter-test/',
      'build/',
      'dist/',
      'jupyter_edt/',
      'ui-tests/test-results/',
      'ui-tests/playwright-report/',
      'ui-tests/artifacts/'
    ]
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ['**/*.{ts,tsx}'],
    languageOptions: {
      globals: { ...globals.browser }
    },
    rules: {
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-namespace': 'off',
      '@typescript-eslint/no-unused-vars': [
        'error',
        { args: 'none', caughtErrors: 'none' }
      ],
      curly: ['error', 'all'],
      eqeqeq: 'error',
      'prefer-arrow-callback': 'error',
      'no-console': ['error', { allow: ['warn', 'error'] }]
    }
  },
  {
    files: ['**/*.spec.{ts,tsx}', '**/__tests__/**'],
    languageOptions: {
      globals: { ...globals.jest, ...globals.node }
    }
  },
  {
    files: ['**/*.{js,cjs}'],
    languageOptions: {
      sourceType: 'commonjs',
      globals: { ...globals.node }
    },
    rules: {
      '@typescript-eslint/no-require-imports': 'off'
    }
  },
  {
    files: ['style/**/*.js', '**/*.mjs'],
    languageOptions: { sourceType: 'module' }
  },
  prettier
);
