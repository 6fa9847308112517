"""Rendezvous pieces: the port reservation, publications and their checks, the Cuebot source."""

import json
import socket
import threading

import pytest

from cue_plugin.node import rendezvous, rendezvous_cuebot
from cue_plugin.node.publication import Publication, proof
from cue_plugin.node.rendezvous import FileSource
from cue_plugin.node.rendezvous_cuebot import CuebotSource, FrameInfo

TOKEN = "t" * 32


def test_reserved_port_refuses_other_programs_but_not_a_reuseaddr_listener():
    with rendezvous.PortReservation() as res:
        with socket.socket() as other, pytest.raises(OSError):
            other.bind(("", res.port))  # a plain bind (or an ephemeral port) cannot take it
        with socket.socket() as store:  # TCPStore binds with SO_REUSEADDR and listens
            store.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            store.bind(("", res.port))
            store.listen()
            assert rendezvous.accepts_connections("127.0.0.1", res.port)
    assert not rendezvous.accepts_connections("127.0.0.1", res.port, timeout_s=0.5)


def test_a_taken_port_is_exit_code_6():
    with socket.socket() as taken:
        taken.bind(("", 0))
        with pytest.raises(rendezvous.PortUnavailable, match="cannot reserve TCP port") as info:
            rendezvous.PortReservation(taken.getsockname()[1])
    assert info.value.exit_code == 6


def test_frame_zero_replaces_the_old_publication_with_a_signed_one(tmp_path):
    source = FileSource(tmp_path / "rendezvous" / "main.json")
    source.path.parent.mkdir()
    source.path.write_text(json.dumps({"host": "old", "port": 1, "attempt": "a", "token": ""}))
    reservation, pub = source.host("node7", TOKEN)
    with reservation:
        assert source.read() == pub and pub.host == "node7" and pub.port == reservation.port
        assert pub.token == proof(TOKEN, "node7", pub.port, pub.attempt) and TOKEN not in source.path.read_text()
        assert oct(source.path.stat().st_mode & 0o777) == "0o640"
        source.retract(Publication("node7", 1, "someone-else"))
        assert source.path.exists()  # not ours to remove
        source.retract(pub)
        assert not source.path.exists()


@pytest.mark.parametrize("data", [{}, {"host": "h"}, {"host": "", "port": 5, "attempt": "a"},
                                  {"host": "h", "port": 70000, "attempt": "a"}, ["x"], {"host": "h", "port": "x", "attempt": 1}])
def test_malformed_publications_are_ignored(data):
    assert Publication.from_json(data) is None


def test_a_publication_of_another_job_is_not_used(tmp_path):
    with socket.socket() as live:
        live.bind(("127.0.0.1", 0))
        live.listen()
        port = live.getsockname()[1]
        source = FileSource(tmp_path / "main.json")
        foreign = Publication("127.0.0.1", port, "x", proof("other-job", "127.0.0.1", port, "x"))
        source.path.write_text(json.dumps(foreign.to_json()))
        with pytest.raises(rendezvous.RendezvousTimeout, match="does not carry this job's token"):
            rendezvous.wait_for_main(source, rank=1, token=TOKEN, timeout_s=0.3, poll_s=0.1)
        mine = Publication("127.0.0.1", port, "y", proof(TOKEN, "127.0.0.1", port, "y"))
        threading.Timer(0.2, lambda: source.path.write_text(json.dumps(mine.to_json()))).start()
        assert rendezvous.wait_for_main(source, rank=1, token=TOKEN, timeout_s=5, poll_s=0.05) == mine


def test_cuebot_port_is_deterministic_and_in_range():
    ports = {rendezvous_cuebot.cuebot_port("job-id", r) for r in range(50)}
    assert all(20000 <= p < 30000 for p in ports) and len(ports) > 40
    assert rendezvous_cuebot.cuebot_port("job-id", 3) == rendezvous_cuebot.cuebot_port("job-id", 3)


def test_cuebot_source_uses_running_frame_zero_and_its_retry_count():
    answers = [FrameInfo("WAITING", "", 0), FrameInfo("RUNNING", "node3/4.00/1", 2)]
    source = CuebotSource("demo-sh010-artist_cuetrain", "train", "job-id", lookup=lambda job, layer, n: answers.pop(0))
    assert source.read() is None  # not running: its last_resource would be stale
    pub = source.read()
    assert (pub.host, pub.port, pub.attempt) == ("node3", rendezvous_cuebot.cuebot_port("job-id", 2), "retry-2")


def test_cuebot_source_needs_rqd_variables_and_survives_lookup_errors():
    with pytest.raises(rendezvous.RendezvousError, match="CUE_JOB and CUE_LAYER"):
        CuebotSource("", "", "")

    def broken(job, layer, number):
        raise ConnectionError("no cuebot")

    source = CuebotSource("j", "train", "id", lookup=broken)
    assert source.read() is None
    with pytest.raises(rendezvous.RendezvousError, match="check CUEBOT_HOSTS"):
        source.host(None, None)
