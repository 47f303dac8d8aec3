export * from './describe';
export * from './geometry';
export * from './intervals';
export * from './model';
export * from './panel';
export * from './section';
export * from './view';
