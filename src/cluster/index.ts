export * from './panel';
