export * from './model';
export * from './panel';
