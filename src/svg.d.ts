/** SVG files are bundled as raw strings (by the builder and by the jest transform). */
declare module '*.svg' {
  const value: string;
  export default value;
}
