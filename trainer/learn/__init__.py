"""The training step and loop: networks, optimizers, schedule, EMA, precision, noise scale, rank 0's writer.

Modules (its public surface; names starting with ``_`` stay inside their module):

- :mod:`trainer.learn.background`: Rank 0's one background writer thread: contact sheets, previews and checkpoints,
  off the training thread.
- :mod:`trainer.learn.contact_sheet`: Contact sheets: a labelled grid of Input, Output and Ground Truth crops, and
  the PNG bytes rank 0 writes.
- :mod:`trainer.learn.divergence`: The divergence watch: a run whose loss blows up stops with one clear error (exit
  81), not garbage weights.
- :mod:`trainer.learn.ema`: Exponential moving average (EMA) of the weights, the model rank 0 exports when ``--ema-
  decay`` is set.
- :mod:`trainer.learn.focus_map`: The head start's crop focus: a model's error on this shot's training frames
  (``--init-focus``).
- :mod:`trainer.learn.heads`: How a network's tail becomes its output frame: the RGB residual, upres, and named
  channels.
- :mod:`trainer.learn.init_from`: ``--init-from PATH``: start a run from another model's weights (a head start), not
  from random ones.
- :mod:`trainer.learn.loss`: The training loss per crop, for any channel plan (``--target-channels``,
  ``--matte-loss``).
- :mod:`trainer.learn.model`: The networks only: residual U-Nets for image-to-image tasks (no I/O, no arguments
  parsing).
- :mod:`trainer.learn.noise_scale`: The gradient noise scale, measured while training (McCandlish et al. 2018, "An
  Empirical Model of Large-Batch Training", appendix A).
- :mod:`trainer.learn.optim`: Muon for the hidden convolutions, Adam for the rest (``--optimizer muon``).
- :mod:`trainer.learn.precision`: Mixed precision, memory format and backend switches of the training step, per
  device.
- :mod:`trainer.learn.preview`: Review images: what the network makes of the shot, drawn for an artist's eye (rank
  0 writes them).
- :mod:`trainer.learn.resume`: Where a rank's run starts: the state a checkpoint holds, rank 0's latest checkpoint
  for the whole gang (``--resume``) and another model's weights (``--init-from``).
- :mod:`trainer.learn.run_writer`: Rank 0's outputs: run.json, metrics, contact sheets, checkpoints and the exported
  model.
- :mod:`trainer.learn.schedule`: The optimizer and learning-rate schedule of every rank (``--optimizer``, ``--adam-
  beta1``, ``--adam-beta2``, ``--lr-scaling``, ``--lr-schedule``, ``--warmup-steps``).
- :mod:`trainer.learn.stopping`: The trainer's side of when a run stops: ``trainer.core.stopping`` decides; this
  feeds it (held-out scores) and records it (``run.json``'s ``budget``).
- :mod:`trainer.learn.train`: The training loop every rank (farm frame) runs.
- :mod:`trainer.learn.unet`: The ``unet`` network: a plain U-Net trunk (Ronneberger et al. 2015) under cuetrain's
  output heads.
"""

__all__ = [
    'background',
    'contact_sheet',
    'divergence',
    'ema',
    'focus_map',
    'heads',
    'init_from',
    'loss',
    'model',
    'noise_scale',
    'optim',
    'precision',
    'preview',
    'resume',
    'run_writer',
    'schedule',
    'stopping',
    'train',
    'unet',
]
