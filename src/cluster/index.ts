export * from './devices';
export * from './model';
export * from './panel';
