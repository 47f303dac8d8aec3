export * from './components';
export * from './jobcomponents';
export * from './widget';
