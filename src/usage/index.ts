export * from './format';
export * from './model';
export * from './section';
