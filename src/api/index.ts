export * from './client';
export * from './events';
export * from './job';
export * from './types';
