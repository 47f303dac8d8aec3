/** What a log view shows while the logs it shows are empty, or none exists yet. */
export const NO_OUTPUT = 'no output yet';

/** What a log view's choice says of the failure's folded logs (FOLDED_LOGS). */
export const FOLDED_LABEL = 'failure';

/** The tooltip of that choice: what it shows, and where the raw logs are. */
export const FOLDED_TITLE =
  "Each traceback once, with the workers that printed it: the program's own " +
  "frames, the framework's folded; then each log's last lines. The other " +
  'choices show the raw logs.';
