/** What a log view shows while the logs it shows are empty, or none exists yet. */
export const NO_OUTPUT = 'no output yet';
