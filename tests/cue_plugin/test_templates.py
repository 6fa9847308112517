"""Farm templates: the built-in ones load, merge order is defaults < template < explicit, bad keys fail loudly."""

import pytest

from cue_plugin.submit import templates
from cue_plugin.submit.spec import FarmError, TrainingJob
from tests.cue_plugin.conftest import make_config

PEOPLE = dict(show="demo", shot="sh010", user="artist")


def test_builtin_templates_are_listed_and_each_makes_a_valid_job():
    names = templates.list_templates()
    assert {"gpu-small", "gpu-medium", "gpu-large", "cpu-test"} <= set(names)
    for name in names:
        t = templates.load_template(name)
        assert t.description and set(t.values) <= set(templates.TEMPLATE_KEYS)
        job = templates.make_job(make_config(batch_size=16), template=name, **PEOPLE)
        assert isinstance(job, TrainingJob) and job.world_size == t.values["world_size"]


def test_template_beats_defaults_and_explicit_beats_template():
    job = templates.make_job(make_config(), template="gpu-small", cores=2, tags=["gpu", "a100"], **PEOPLE)
    assert (job.service, job.gpus, job.memory_mb) == ("cuetrain-gpu", 1, 24576)  # from the template
    assert (job.cores, job.tags) == (2.0, ("gpu", "a100"))  # explicit wins
    assert job.max_retries == 1 and job.priority == 100
    assert job.sync_interval == TrainingJob.sync_interval  # neither sets it: the dataclass default
    assert job.name == "cuetrain_run"  # from the run directory name: Cuebot refuses duplicate live names


def test_ranks_per_frame_comes_from_the_template_and_the_flag_wins():
    node = templates.make_job(make_config(batch_size=16), template="gpu-node-4x", **PEOPLE)
    assert (node.world_size, node.ranks_per_frame, node.frames, node.gpus) == (8, 4, 2, 1)
    assert node.frame_resources == {"cores": 24.0, "memory_mb": 30720, "gpus": 4, "gpu_memory_mb": 98304}
    two = templates.make_job(make_config(batch_size=16), template="gpu-node-4x", ranks_per_frame=2, **PEOPLE)
    assert (two.frames, two.frame_resources["gpus"]) == (4, 2)
    assert templates.make_job(make_config(), template="cpu-test", **PEOPLE).ranks_per_frame == 1  # today's contract


def test_none_values_do_not_override(tmp_path):
    job = templates.make_job(make_config(), template="cpu-test", world_size=None, cores=None, **PEOPLE)
    assert job.world_size == 2 and job.cores == 1.0


def test_template_path_env_overrides_builtin(tmp_path, monkeypatch):
    (tmp_path / "gpu-small.toml").write_text('world_size = 3\ncores = 6\ndescription = "studio"\n')
    monkeypatch.setenv("CUETRAIN_TEMPLATE_PATH", str(tmp_path))
    t = templates.load_template("gpu-small")
    assert t.path == tmp_path / "gpu-small.toml" and t.values == {"world_size": 3, "cores": 6}


def test_unknown_template_key_lists_the_valid_keys(tmp_path):
    (tmp_path / "bad.toml").write_text("world_size = 2\ngpu = 1\n")
    with pytest.raises(FarmError, match=r"unknown template key\(s\) \['gpu'\]; valid keys are .*'gpus'"):
        templates.load_template("bad", folders=[tmp_path])


@pytest.mark.parametrize("text,match", [("cores = 'four'", "cores='four' must be of type int or float"),
                                        ("gpus = true", "gpus=True must be of type int"),
                                        ("memory_mb = -1", "memory_mb=-1 must be >= 0"),
                                        ("ranks_per_frame = 0", "ranks_per_frame=0 must be >= 1"),
                                        ("tags = ['gpu|x']", "not valid OpenCue tags"),
                                        ("world_size = [", "cannot read farm template")])
def test_bad_template_values_name_file_and_key(tmp_path, text, match):
    (tmp_path / "t.toml").write_text(text + "\n")
    with pytest.raises(FarmError, match=match):
        templates.load_template("t", folders=[tmp_path])


def test_unknown_template_name_lists_available(tmp_path):
    (tmp_path / "a.toml").write_text("world_size = 2\n")
    with pytest.raises(FarmError, match=r"unknown farm template 'zzz'; available: a"):
        templates.load_template("zzz", folders=[tmp_path])


def test_unknown_explicit_field_and_missing_world_size():
    with pytest.raises(FarmError, match=r"unknown job field\(s\) \['gpu'\]; valid fields are .*'gpus'"):
        templates.make_job(make_config(), gpu=1, **PEOPLE)
    with pytest.raises(FarmError, match="missing job value.*world_size"):
        templates.make_job(make_config(), **PEOPLE)


# -- --data-cache-mb: the template key and the builder's memory check --------------------------------


def test_each_builtin_template_sets_a_data_cache_that_fits_its_memory_reservation():
    from cue_plugin.submit.builder import check_rank_memory
    from trainer.core.rankmemory import rank_memory_mb

    for name in templates.list_templates():
        job = templates.make_job(make_config(batch_size=16), template=name, **PEOPLE)
        assert job.train.data_cache_mb == templates.load_template(name).values["data_cache_mb"], name
        assert rank_memory_mb(job.train.data_cache_mb, job.gpus > 0) <= job.memory_mb, name
        check_rank_memory(job)
        assert f"--data-cache-mb {job.train.data_cache_mb}" in " ".join(job.train.to_argv())


def test_an_explicit_data_cache_beats_the_template():
    job = templates.make_job(make_config(batch_size=16, data_cache_mb=256), template="gpu-node-4x", **PEOPLE)
    assert job.train.data_cache_mb == 256


def test_the_builder_refuses_ranks_that_cannot_fit_their_reservation_and_names_the_fix():
    from cue_plugin.submit import builder

    big = templates.make_job(make_config(batch_size=16, data_cache_mb=8192), template="gpu-node-4x", **PEOPLE)
    with pytest.raises(FarmError, match=r"each rank reserves memory_mb=7680 MiB but needs about 11520 MiB on a GPU "
                                        r"node .*lower --data-cache-mb to 4352 or less, or reserve more memory"):
        builder.dry_run(big)
    tiny = templates.make_job(make_config(), template="cpu-test", memory_mb=512, **PEOPLE)
    with pytest.raises(FarmError, match=r"needs about 2048 MiB on a CPU node .*\): reserve more memory per rank"):
        builder.dry_run(tiny)
    with pytest.raises(FarmError, match="data_cache_mb=-1 must be >= 0"):
        templates.validate_values({"data_cache_mb": -1}, "t.toml")
