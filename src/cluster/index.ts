export * from './devices';
export * from './model';
export * from './panel';
export * from './timeline';
