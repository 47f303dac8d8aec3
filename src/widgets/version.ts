/**
 * The ipywidgets module of the lab extension: models and views are registered
 * under this name and version (package.json's), and the Python widgets
 * (jupyter_edt/notebook/widgets.py) ask for `^<version>`.
 */
export const MODULE_NAME = 'jupyter-edt';

/** Keep equal to package.json's version (a jest test checks). */
export const MODULE_VERSION = '0.1.0';
