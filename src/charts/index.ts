export * from './allocation';
export * from './chart';
export * from './downsample';
export * from './loss';
export * from './series';
