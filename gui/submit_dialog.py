"""The "Train on Render Farm" dialog: five sections, each a ``QGroupBox`` (:mod:`gui.submit_sections`); submit.

- **Shot**: show and shot (OpenCue's), Input and Ground Truth folders, run directory (and Resume), "Start from"
  (``--init-from``, :class:`gui.start_from.StartFromField`).
- **What to learn**: "Learn" (``--input-channels`` / ``--target-channels`` of :data:`trainer.core.channels.TASKS`),
  "Upscale factor" (``--scale``), "Augmentation" (``--augment``), "Preview frames" (``--preview``); the Learn,
  Augmentation and Preview fields are :mod:`gui.task_fields`, whose defaults (Colour, off, none) add no argument.
- **How long**: "Train for" (:mod:`gui.train_for`): N steps (the default, ``--steps`` alone), until HH:MM
  (``--time-budget``, the next such local time with its UTC offset) or until it stops improving
  (``--stop-when-flat``); the steps box is then a cap.
- **Farm**: template, world size, ranks per frame, the optional inference layer, and "How many machines?"
  (:mod:`gui.advisor_view`), which runs ``cuetrain advise`` for the dialog's values in a separate process and can
  copy its recommended world size and sync interval.
- **Advanced** (folded, as in CopyCat's panel): model size, crop size, batch size, sync interval.

The sections only place the fields: every field is an attribute of :class:`SubmitDialog` and goes into the
:class:`TrainConfig` and the job as before. Problems are listed inline before anything is sent (missing folders,
world size above batch size, ...). Submitting runs on the controller's worker; the dialog waits for
``submit_finished`` (it then closes) or ``submit_failed`` (the farm's message is shown, never a traceback). A host
can fill the folders, the factor and the task from its selection (:meth:`SubmitDialog.apply_prefill`, e.g. Nuke's
two Read nodes through :func:`gui.prefill.nuke_prefill`).
"""

from __future__ import annotations

import dataclasses
import getpass
import logging
import os
from pathlib import Path
from typing import Sequence

from qtpy.QtCore import Qt
from qtpy.QtWidgets import QCheckBox, QComboBox, QDialog, QDialogButtonBox, QGroupBox, QLineEdit, QVBoxLayout, QWidget

from cue_plugin.submit.spec import FarmError, JobHandle, TrainingJob
from cue_plugin.submit.templates import list_templates, load_template, make_job
from gui.advisor_view import AdviseRequest, AdvisorView
from gui.controller import RunsController
from gui.head_start import start_mismatch
from gui.poller import measured_noise_scale
from gui.prefill import Prefill
from gui.start_from import StartFromField
from gui.submit_sections import (WARN_STYLE, AdvancedSection, align_labels, folder_row, form_section, note, pair_row,
                                 spin)
from gui.task import task_channels
from gui.task_fields import PreviewField, augment_spin, learn_box, set_task
from gui.train_for import TrainForField
from trainer.core.config import MODEL_SIZES, SCALES, ConfigError, TrainConfig
from trainer.record.rundir import RunPaths

log = logging.getLogger(__name__)

_DEFAULTS = {f.name: f.default for f in dataclasses.fields(TrainConfig) if f.default is not dataclasses.MISSING}
NO_TEMPLATE = "(defaults)"
#: The upscale factor dropdown's text for each ``--scale``.
SCALE_TEXTS = {1: "1x (same size)", **{s: f"{s}x" for s in SCALES if s != 1}}
#: The dialog's narrowest width [pixels]: room for a shot's plate path and the fields' hints.
MIN_WIDTH = 720


class SubmitDialog(QDialog):
    """Fill in a training run and submit it to the farm through ``controller``.

    Args:
        controller: submits the job and reports back.
        template_folders: folders searched for farm templates (default: ``cue_plugin.submit.templates``'s
            ``CUETRAIN_TEMPLATE_PATH`` then ``farm_templates/``).
        parent: host window.
        advisor_command: the scaling advisor's command (default ``python -m cuetrain advise``).
    """

    def __init__(self, controller: RunsController, template_folders: list[Path] | None = None,
                 parent: QWidget | None = None, advisor_command: Sequence[str] | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Train on Render Farm")
        self.setMinimumWidth(MIN_WIDTH)
        self._controller = controller
        self._folders = template_folders
        self._busy = False
        self._make_fields()
        self.advisor = AdvisorView(self.advise_request, advisor_command)
        self.advisor.recommendation_used.connect(self.use_recommendation)
        self._build_layout()
        controller.submit_finished.connect(self._on_finished)
        controller.submit_failed.connect(self._on_failed)
        controller.submit_progressed.connect(self._on_progress)

    def _make_fields(self) -> None:
        self.input_edit, self.target_edit, self.run_dir_edit = QLineEdit(), QLineEdit(), QLineEdit()
        self.model_box = QComboBox()
        self.model_box.addItems(list(MODEL_SIZES))
        self.model_box.setCurrentText(_DEFAULTS["model_size"])
        self.crop_spin = spin(_DEFAULTS["crop_size"], 8, 4096)
        self.batch_spin = spin(_DEFAULTS["batch_size"], 1, 4096)
        self.train_for = TrainForField(_DEFAULTS["steps"])  # N steps, until HH:MM or until flat (gui.train_for)
        self.steps_spin = self.train_for.steps_spin  # --steps: the length, or the cap in the other two modes
        self.world_spin = spin(2, 1, 1024)
        self.frame_spin = spin(1, 1, 64)  # ranks per frame: trainers sharing one host
        self.frame_spin.setToolTip("ranks per frame: each frame (one host) runs this many ranks, one GPU each; "
                                   "the world size must be a multiple of it")
        self.sync_spin = spin(1, 1, 100_000)
        self.resume_box = QCheckBox("Resume from the latest checkpoint in the run directory")
        self.scale_box = QComboBox()
        for scale in SCALES:
            self.scale_box.addItem(SCALE_TEXTS[scale], scale)
        self.scale_box.setToolTip("upres: the Ground Truth is this many times the Input's width and height")
        self.scale_note = note("scale_note")  # where a host's proposed factor came from, or why it is a guess
        self.start_field = StartFromField(self._controller)
        self.start_note = note("start_note")  # the chosen head start does not fit the factor or model size
        self.learn_box = learn_box()  # colour, matte or colour+alpha: the channels in and out
        self.augment_spin = augment_spin(_DEFAULTS["augment"])
        self.preview_field = PreviewField(self)
        self.preview_note = note("preview_note")  # the preview path does not exist
        self.preview_field.changed.connect(self._update_preview_note)
        choices = (self.start_field.changed, self.scale_box.currentIndexChanged, self.model_box.currentIndexChanged)
        for changed in choices:
            changed.connect(lambda *_: self._update_start_note())
        self.template_box = QComboBox()
        self._fill_templates()
        self.template_box.currentIndexChanged.connect(self._on_template_chosen)
        self.show_edit = QLineEdit(os.environ.get("SHOW", ""))
        self.shot_edit = QLineEdit(os.environ.get("SHOT", ""))
        # optional inference layer after training (cue_plugin.submit.infer): both folders or neither
        self.infer_input_edit, self.infer_output_edit = QLineEdit(), QLineEdit()
        self.errors = note("errors")  # hidden while empty, as every note
        self.errors.setStyleSheet("color: #e05050;")
        self.progress = note("progress")  # what a submit in flight is doing (the cuetrain subprocess's log lines)
        self.progress.setStyleSheet("")
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.submit_button = self.buttons.addButton("Submit", QDialogButtonBox.ButtonRole.AcceptRole)
        self.buttons.accepted.connect(self.try_submit)
        self.buttons.rejected.connect(self.reject)

    def _fill_templates(self) -> None:
        """Template dropdown: "(defaults)" then every farm template, its description as tooltip."""
        self.template_box.addItem(NO_TEMPLATE, "")
        for name in list_templates(self._folders):
            self.template_box.addItem(name, name)
            try:
                tip = load_template(name, self._folders).description
            except FarmError as exc:
                tip = f"invalid: {exc}"
            self.template_box.setItemData(self.template_box.count() - 1, tip, Qt.ItemDataRole.ToolTipRole)

    def _on_template_chosen(self, *_: object) -> None:
        """Show the template's default world size and sync interval (the fields still win)."""
        name = self.template_box.currentData()
        if not name:
            return
        try:
            values = load_template(name, self._folders).values
        except FarmError as exc:
            self.show_errors([str(exc)])
            return
        self.world_spin.setValue(values.get("world_size", self.world_spin.value()))
        self.sync_spin.setValue(values.get("sync_interval", self.sync_spin.value()))
        self.frame_spin.setValue(values.get("ranks_per_frame", 1))

    def _build_layout(self) -> None:
        """The five sections in order, then the problems, the submit progress and the buttons."""
        folders = [(label, folder_row(self, edit)) for label, edit in (
            ("Input sequence", self.input_edit), ("Ground truth sequence", self.target_edit),
            ("Run directory", self.run_dir_edit), ("Then apply to (optional)", self.infer_input_edit),
            ("Write results to", self.infer_output_edit))]
        self.show_edit.setToolTip("the OpenCue show the job runs under ($SHOW)")
        self.shot_edit.setToolTip("the OpenCue shot the job belongs to ($SHOT)")
        self.shot_section = form_section("Shot", "shot_section", [
            ("Show", pair_row(self.show_edit, "Shot", self.shot_edit)), *folders[:3], ("", self.resume_box),
            ("Start from", self.start_field), ("", self.start_note)])
        self.learn_section = form_section("What to learn", "learn_section", [
            ("Learn", self.learn_box), ("Upscale factor", self.scale_box), ("", self.scale_note),
            ("Augmentation [probability]", self.augment_spin), ("Preview frames", self.preview_field),
            ("", self.preview_note)])
        self.length_section = form_section("How long", "length_section", [("Train for", self.train_for)])
        self.farm_section = form_section("Farm", "farm_section", [
            ("Farm template", self.template_box), ("World size [ranks]", self.world_spin),
            ("Ranks per frame", self.frame_spin), *folders[3:]], below=[self.advisor])
        self.advanced_section = AdvancedSection([
            ("Model size", self.model_box), ("Crop size [px]", self.crop_spin),
            ("Batch size [crops]", self.batch_spin), ("Sync interval [steps]", self.sync_spin)])
        for changed in (self.model_box.currentIndexChanged, self.crop_spin.valueChanged,
                        self.batch_spin.valueChanged, self.sync_spin.valueChanged):
            changed.connect(lambda *_: self._update_advanced_summary())
        self._update_advanced_summary()
        align_labels(self.sections())
        layout = QVBoxLayout(self)
        for section in self.sections():
            layout.addWidget(section)
        layout.addWidget(self.errors)
        layout.addWidget(self.progress)
        layout.addWidget(self.buttons)

    def sections(self) -> list[QGroupBox]:
        """Shot, What to learn, How long, Farm, Advanced: the dialog's sections, top to bottom."""
        return [self.shot_section, self.learn_section, self.length_section, self.farm_section,
                self.advanced_section]

    def _update_advanced_summary(self) -> None:
        sync = self.sync_spin.value()
        self.advanced_section.set_summary(
            f"{self.model_box.currentText()} model, {self.crop_spin.value()} px crops, batch "
            f"{self.batch_spin.value()} crops, sync every {sync} step{'s' if sync != 1 else ''}")

    # ----------------------------------------------------------- validation
    def validate(self) -> list[str]:
        """Every problem with the form, one sentence each (empty: ready to submit)."""
        problems = []
        for label, edit in (("Input sequence", self.input_edit), ("Ground truth sequence", self.target_edit)):
            path = edit.text().strip()
            if not path:
                problems.append(f"{label} folder is required.")
            elif not os.path.isdir(os.path.expanduser(path)):
                problems.append(f"{label} folder {path} does not exist.")
        problems += self._run_dir_problems()
        problems += self._start_problems()
        problems += self.preview_field.problems()
        if self.world_spin.value() > self.batch_spin.value():
            problems.append(f"World size {self.world_spin.value()} is larger than batch size {self.batch_spin.value()}: "
                            "every rank needs at least one crop per step; raise the batch or lower the world size.")
        if self.world_spin.value() % self.frame_spin.value():
            problems.append(f"World size {self.world_spin.value()} is not a multiple of ranks per frame "
                            f"{self.frame_spin.value()}: every frame runs the same number of ranks.")
        for label, edit in (("Show", self.show_edit), ("Shot", self.shot_edit)):
            if not edit.text().strip():
                problems.append(f"{label} is required.")
        return problems

    def _run_dir_problems(self) -> list[str]:
        run_dir = self.run_dir_edit.text().strip()
        if not run_dir:
            return ["Run directory is required (a folder on shared storage the farm can write)."]
        path = Path(os.path.expanduser(run_dir))
        if not path.parent.is_dir():
            return [f"Run directory's parent folder {path.parent} does not exist."]
        if RunPaths.of(path).run_json.exists() and not self.resume_box.isChecked():
            return [f"Run directory {run_dir} already holds a run; choose a new folder or tick Resume."]
        return []

    def _start_problems(self) -> list[str]:
        path = self.start_field.path()
        if path and not os.path.exists(path):
            return [f"Start from {path} does not exist (moved or deleted?); choose another model or Random weights."]
        mismatch = self._start_mismatch()
        return [mismatch] if mismatch else []

    def _start_mismatch(self) -> str:
        """Why the chosen head start does not fit the factor or model size ("" when it does or is unknown)."""
        return start_mismatch(self.start_field.candidate(), self.scale(), self.model_box.currentText())

    def scale(self) -> int:
        """The chosen upscale factor (``--scale``) [1]."""
        return int(self.scale_box.currentData())

    def set_scale(self, scale: int) -> None:
        """Choose the upscale factor ``scale`` (one of ``SCALES``; another value leaves the choice as it is)."""
        index = self.scale_box.findData(scale)
        if index >= 0:
            self.scale_box.setCurrentIndex(index)

    def apply_prefill(self, prefill: Prefill | None) -> None:
        """Fill the folders, the factor and the task a host proposes; its note or warning is shown under the factor.
        ``None`` (nothing selected) leaves the fields as they are and clears an earlier note."""
        if prefill is None:
            self.scale_note.setText("")
            return
        for edit, value in ((self.input_edit, prefill.input_dir), (self.target_edit, prefill.target_dir)):
            if value:
                edit.setText(value)
        if prefill.input_dir or prefill.target_dir:
            self.set_scale(prefill.scale)
            set_task(self.learn_box, prefill.task)  # "" (the host could not tell) leaves the choice
        self.scale_note.setText(prefill.warning or prefill.note)
        self.scale_note.setStyleSheet(WARN_STYLE if prefill.warning else "")

    def _update_start_note(self) -> None:
        self.start_note.setText(self._start_mismatch())

    def _update_preview_note(self, *_: object) -> None:
        self.preview_note.setText(" ".join(self.preview_field.problems()))

    def showEvent(self, event) -> None:  # noqa: N802 - Qt API: a reopened dialog lists the runs finished since
        self.start_field.refresh()
        super().showEvent(event)

    def build_job(self) -> TrainingJob:
        """The job the form describes: job defaults < farm template < the dialog's fields.

        Raises:
            ConfigError, FarmError: a value or the template is invalid (the message says which).
        """
        input_channels, target_channels = task_channels(self.learn_box.currentData())
        train = TrainConfig(
            input_dir=_abs(self.input_edit.text()), target_dir=_abs(self.target_edit.text()),
            run_dir=_abs(self.run_dir_edit.text()), **self.train_for.config_fields(),
            batch_size=self.batch_spin.value(), crop_size=self.crop_spin.value(),
            model_size=self.model_box.currentText(), resume=self.resume_box.isChecked(), scale=self.scale(),
            init_from=_abs(self.start_field.path()) if self.start_field.path() else "",
            input_channels=input_channels, target_channels=target_channels,
            augment=round(self.augment_spin.value(), 2),
            preview=_abs(self.preview_field.path()) if self.preview_field.path() else "")
        infer = None
        if self.infer_input_edit.text().strip() or self.infer_output_edit.text().strip():
            from cue_plugin.submit.infer_cli import layer_from_folders

            infer = layer_from_folders(self.infer_input_edit.text().strip(), self.infer_output_edit.text().strip(),
                                       train.run_dir)
        return make_job(train, template=self.template_box.currentData() or None, folders=self._folders,
                        world_size=self.world_spin.value(), show=self.show_edit.text().strip(),
                        shot=self.shot_edit.text().strip(), user=getpass.getuser(),
                        sync_interval=self.sync_spin.value(), ranks_per_frame=self.frame_spin.value(), infer=infer)

    # -------------------------------------------------------------- advisor
    def advise_request(self) -> AdviseRequest:
        """The advisor's view of the form: data, model, crop, batch, steps; world sizes up to max(8, ours);
        the gradient noise scale an earlier run in the run directory measured (:func:`gui.poller.measured_noise_scale`),
        so the advisor also answers in time to quality.

        Raises:
            ValueError: the input or ground truth folder is missing (the advisor reads a few frames).
        """
        for label, edit in (("Input sequence", self.input_edit), ("Ground truth sequence", self.target_edit)):
            if not os.path.isdir(os.path.expanduser(edit.text().strip())):  # "" is no folder either
                raise ValueError(f"{label} folder is needed first: the advisor times training on a few of its frames.")
        return AdviseRequest(input_dir=_abs(self.input_edit.text()), target_dir=_abs(self.target_edit.text()),
                             model_size=self.model_box.currentText(), crop_size=self.crop_spin.value(),
                             batch_size=self.batch_spin.value(), steps=self.steps_spin.value(),
                             max_world_size=max(8, self.world_spin.value()), ranks_per_frame=self.frame_spin.value(),
                             noise_scale=measured_noise_scale(self.run_dir_edit.text()))

    def use_recommendation(self, world_size: int, sync_interval: int) -> None:
        """Set the world size and sync interval fields (e.g. from the advisor's recommendation)."""
        self.world_spin.setValue(world_size)
        self.sync_spin.setValue(sync_interval)

    def done(self, result: int) -> None:  # noqa: D102 - QDialog API: closing stops a running probe
        self.advisor.shutdown()
        super().done(result)

    # ------------------------------------------------------------ submitting
    def try_submit(self) -> bool:
        """Validate, build the job and hand it to the controller; False when the form has problems."""
        if self._busy:
            return False
        problems = self.validate()
        if not problems:
            try:
                job = self.build_job()
            except (ConfigError, FarmError) as exc:
                problems = [str(exc)]
        if problems:
            self.show_errors(problems)
            return False
        self.show_errors([])
        self._set_busy(True)
        self._controller.submit(job)
        return True

    def show_errors(self, problems: list[str]) -> None:
        """List ``problems`` in the dialog (an empty list clears them)."""
        self.errors.setText("\n".join(problems))

    def _on_progress(self, line: str) -> None:
        if self._busy:
            self.progress.setText(line)

    def _set_busy(self, busy: bool) -> None:
        self._busy = busy
        self.progress.setText("Submitting: starting cuetrain..." if busy else "")
        self.submit_button.setEnabled(not busy)
        self.submit_button.setText("Submitting..." if busy else "Submit")

    def _on_finished(self, handle: JobHandle) -> None:
        if self._busy:
            self._set_busy(False)
            log.info("submit dialog: job %s submitted", handle.job_name or handle.job_id)
            self.accept()

    def _on_failed(self, message: str) -> None:
        if self._busy:
            self._set_busy(False)
            self.show_errors([f"Submit failed: {message}"])


def _abs(path: str) -> str:
    return str(Path(os.path.expanduser(path.strip())).absolute())
