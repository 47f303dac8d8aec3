export * from './actions';
export * from './adminconfig';
export * from './commands';
export * from './components';
export * from './jobcomponents';
export * from './widget';
