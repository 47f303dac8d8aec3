export * from './controller';
export * from './panel';
