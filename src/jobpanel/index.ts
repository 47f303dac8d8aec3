export * from './controller';
export * from './panel';
export * from './dialogs';
export * from './logtext';
