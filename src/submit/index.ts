export * from './dialog';
export * from './script';
