"""Export: a TorchScript archive (``final.zip``) whose searches are compiled from
:mod:`asrkit.decode` (see :mod:`asrkit.export.torchscript` for the module and
:mod:`asrkit.export.archive` for building, checking and saving it)."""
from asrkit.export.archive import (ExportCheckError, check_against_eager, export_model, inference_copy,
                                   load_exported, script_model)
from asrkit.export.torchscript import ScriptableAsr

__all__ = ["ExportCheckError", "ScriptableAsr", "check_against_eager", "export_model", "inference_copy",
           "load_exported", "script_model"]
