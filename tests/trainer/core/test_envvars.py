"""The environment-variable table: distributed detection, fallbacks and errors."""

import pytest

from trainer.core.envvars import EnvError, copycat_env, read_cue_env, read_dist_env

FULL = {"COPYCAT_MAIN_ADDR": "10.0.0.5", "COPYCAT_MAIN_PORT": "29500", "COPYCAT_RANK": "1", "COPYCAT_WORLD_SIZE": "4"}


def test_all_four_make_a_distributed_env():
    env = read_dist_env({**FULL, "COPYCAT_SYNC_INTERVAL": "4", "COPYCAT_LOCAL_ADDR": "eth1"})
    assert (env.distributed, env.rank, env.world_size, env.main_addr, env.main_port) == (True, 1, 4, "10.0.0.5", 29500)
    assert env.sync_interval == 4 and env.local_addr == "eth1" and not env.is_main


@pytest.mark.parametrize("drop", sorted(FULL))
def test_any_missing_variable_falls_back_to_non_distributed_and_names_it(drop):
    env = read_dist_env({k: v for k, v in FULL.items() if k != drop})
    assert not env.distributed and env.missing == (drop,)
    assert (env.rank, env.world_size) == (0, 1)


def test_torchrun_variables_fill_in():
    env = read_dist_env({"MASTER_ADDR": "h", "MASTER_PORT": "1234", "RANK": "0", "WORLD_SIZE": "2"})
    assert env.distributed and env.main_addr == "h" and env.world_size == 2


def test_copycat_wins_over_torchrun():
    env = read_dist_env({**FULL, "RANK": "3", "WORLD_SIZE": "8"})
    assert (env.rank, env.world_size) == (1, 4)


def test_rank_not_below_world_size_is_a_clear_error():
    with pytest.raises(EnvError, match=r"COPYCAT_RANK=4 must be < COPYCAT_WORLD_SIZE=4"):
        read_dist_env({**FULL, "COPYCAT_RANK": "4"})


@pytest.mark.parametrize("name,value", [("COPYCAT_RANK", "one"), ("COPYCAT_WORLD_SIZE", "2.5"),
                                        ("COPYCAT_MAIN_PORT", "http"), ("COPYCAT_SYNC_INTERVAL", "x")])
def test_non_integer_values_name_the_variable(name, value):
    with pytest.raises(EnvError, match=rf"{name}='{value}' is not an integer"):
        read_dist_env({**FULL, name: value})


@pytest.mark.parametrize("name,value", [("COPYCAT_MAIN_PORT", "0"), ("COPYCAT_MAIN_PORT", "70000"),
                                        ("COPYCAT_WORLD_SIZE", "0"), ("COPYCAT_SYNC_INTERVAL", "0")])
def test_out_of_range_values(name, value):
    with pytest.raises(EnvError, match=name):
        read_dist_env({**FULL, name: value})


def test_cue_env_and_copycat_env_round_trip():
    cue = read_cue_env({"CUE_IFRAME": "3", "CUE_GPU_CORES": "0, 2", "CUE_THREADS": "8", "CUE_JOB": "j"})
    assert (cue.frame, cue.gpu_cores, cue.threads, cue.job) == (3, ("0", "2"), 8, "j")
    env = read_dist_env(copycat_env("127.0.0.1", 2000, 2, 3, sync_interval=2))
    assert (env.rank, env.world_size, env.main_port, env.sync_interval) == (2, 3, 2000, 2)
