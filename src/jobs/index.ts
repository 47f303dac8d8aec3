export * from './model';
export * from './state';
export * from './progress';
