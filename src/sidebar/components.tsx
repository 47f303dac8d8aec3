import * as React from 'react';

import { refreshIcon } from '@jupyterlab/ui-components';

/** The panel's header: title and refresh button. */
export function PanelHeader(props: { onRefresh: () => void }): JSX.Element {
  return (
    <header className="jp-edt-header">
      <h2 className="jp-edt-title">Elastic Training</h2>
      <button
        type="button"
        className="jp-edt-refresh jp-Button jp-mod-minimal"
        title="Refresh"
        aria-label="Refresh"
        onClick={props.onRefresh}
      >
        <refreshIcon.react tag="span" />
      </button>
    </header>
  );
}
