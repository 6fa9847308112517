"""A missing RQD prerequisite skips an RQD test, except under CUETRAIN_REQUIRE_NETNS=1 where it fails it."""

from __future__ import annotations

import os
from unittest import mock

import pytest

from tests.cuebot.fixtures import skip_or_fail_missing_prerequisite


def test_a_missing_rqd_prerequisite_fails_under_require_netns():
    with mock.patch.dict(os.environ, {"CUETRAIN_REQUIRE_NETNS": "1"}):
        with pytest.raises(pytest.fail.Exception, match="CUETRAIN_REQUIRE_NETNS=1.*/usr/bin/time"):
            skip_or_fail_missing_prerequisite("RQD runs frames through /usr/bin/time")


def test_a_missing_rqd_prerequisite_skips_otherwise():
    with mock.patch.dict(os.environ, {"CUETRAIN_REQUIRE_NETNS": "0"}):
        with pytest.raises(pytest.skip.Exception, match="/usr/bin/time"):
            skip_or_fail_missing_prerequisite("RQD runs frames through /usr/bin/time")


def test_the_e2e_farm_fails_without_usr_bin_time_under_require_netns():
    from tests.cue_plugin import test_e2e_training

    real_exists = os.path.exists
    with mock.patch.dict(os.environ, {"CUETRAIN_REQUIRE_NETNS": "1"}), \
            mock.patch.object(test_e2e_training.os.path, "exists",
                              lambda p: False if p == "/usr/bin/time" else real_exists(p)):
        with pytest.raises(pytest.fail.Exception, match="/usr/bin/time"):
            next(test_e2e_training.running_farm(2))
