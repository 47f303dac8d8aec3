/**
 * How the job tab shows a job's code: read-only and syntax-highlighted in
 * JupyterLab's own editor (IEditorServices) when the tab has it, else as
 * plain preformatted text.
 */
import { CodeEditor, type IEditorServices } from '@jupyterlab/codeeditor';
import { DisposableDelegate, type IDisposable } from '@lumino/disposable';

import { el } from '../dom';

/**
 * Shows `code` (the file `path`, which picks the highlighting) in `host`;
 * disposing it removes what it made.
 */
export type CodeViewer = (
  host: HTMLElement,
  code: string,
  path: string
) => IDisposable;

/** The code as plain text: what the tab shows without an editor. */
export const plainCodeViewer: CodeViewer = (host, code) => {
  const pre = el('pre', 'jp-edt-spec-code-text', code);
  host.append(pre);
  return new DisposableDelegate(() => pre.remove());
};

/** The code in a read-only JupyterLab editor, highlighted by the file's type. */
export function editorCodeViewer(services: IEditorServices): CodeViewer {
  return (host, code, path) => {
    const model = new CodeEditor.Model({
      mimeType: services.mimeTypeService.getMimeTypeByFilePath(path)
    });
    model.sharedModel.setSource(code);
    const editor = services.factoryService.newInlineEditor({
      host,
      model,
      config: { readOnly: true, lineNumbers: true }
    });
    return new DisposableDelegate(() => {
      editor.dispose();
      model.dispose();
      host.replaceChildren();
    });
  };
}
