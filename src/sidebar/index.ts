export * from './components';
export * from './jobcomponents';
export * from './jobsmodel';
export * from './jobstate';
export * from './widget';
