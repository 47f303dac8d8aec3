export * from './chartdata';
export * from './controller';
export * from './events';
export * from './jobapi';
export * from './plugin';
export * from './version';
