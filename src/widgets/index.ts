export * from './chartdata';
export * from './plugin';
export * from './version';
