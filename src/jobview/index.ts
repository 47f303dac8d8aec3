export * from './detail';
export * from './timeline';
