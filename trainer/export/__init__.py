"""Models out: TorchScript and ONNX files, the libtorch operator floor, the Nuke script, inference.

Modules (its public surface; names starting with ``_`` stay inside their module):

- :mod:`trainer.export.compat`: Will a host's libtorch run ``model.pt``? An offline operator check against a
  release's operator list.
- :mod:`trainer.export.deferred`: ``model.onnx`` after the run: written from a finished run's ``model.pt`` by a
  process of its own.
- :mod:`trainer.export.formats`: The model files a run leaves for the hosts: ``model.pt`` (TorchScript) and
  ``model.onnx``.
- :mod:`trainer.export.infer`: ``cuetrain infer``: full-frame inference with an exported model, same file format
  out.
- :mod:`trainer.export.nuke_script`: ``model_nuke.nk``: a Nuke script that turns a run's ``model.pt`` into a
  ``.cat`` and runs it.
"""

__all__ = [
    'compat',
    'deferred',
    'formats',
    'infer',
    'nuke_script',
]
