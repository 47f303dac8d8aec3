export * from './dialog';
export * from './fitargs';
export * from './script';
export * from './wording';
