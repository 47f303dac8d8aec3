import { LabIcon } from '@jupyterlab/ui-components';

import edtSvgstr from '../style/icons/edt.svg';

/** The Elastic Training icon: the sidebar tab and the command use it. */
export const edtIcon = new LabIcon({
  name: 'jupyter-edt:edt',
  svgstr: edtSvgstr
});
