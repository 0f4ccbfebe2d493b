"""Export: a TorchScript archive (``final.zip``) that decodes with CTC greedy search,
CTC prefix beam search and attention rescoring (see :mod:`asrkit.export.torchscript`)."""
from asrkit.export.torchscript import (ExportCheckError, ScriptableAsr, check_against_eager, export_model,
                                       load_exported, script_model)

__all__ = ["ExportCheckError", "ScriptableAsr", "check_against_eager", "export_model", "load_exported",
           "script_model"]
