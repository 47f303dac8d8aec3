export * from './components';
export * from './model';
export * from './widget';
