"""Address and interface choice (trainer.core.netaddr) on injected interface and route tables."""

import pytest

from trainer.core import netaddr
from trainer.core.netaddr import NetAddrError, choose_collective, choose_main

FARM = {"lo": ("127.0.0.1",), "eth0": ("10.1.0.5",), "ib0": ("192.168.7.5",), "docker0": ("172.17.0.1",)}


def routes(table: dict[str, str | None]):
    """A route lookup: destination -> source address (None: unroutable); unknown destinations are unroutable."""
    return lambda dest: table.get(dest)


def test_the_route_to_cuebot_wins_over_the_default_route():
    pick = choose_main(FARM, routes({"cuebot.farm": "192.168.7.5", netaddr.DEFAULT_ROUTE_PROBE: "10.1.0.5"}),
                       ["cuebot.farm:8443"])
    assert (pick.address, pick.interface) == ("192.168.7.5", "ib0")
    assert "routes to Cuebot at cuebot.farm" in pick.reason


def test_cuebot_on_loopback_or_unknown_falls_back_to_the_default_route():
    route = routes({"127.0.0.1": "127.0.0.1", netaddr.DEFAULT_ROUTE_PROBE: "10.1.0.5"})
    pick = choose_main(FARM, route, ["127.0.0.1:8443", "gone.farm"])
    assert (pick.address, pick.interface, pick.reason) == ("10.1.0.5", "eth0", "its interface has the default route")


def test_without_routes_the_only_non_loopback_interface_is_used():
    pick = choose_main({"lo": ("127.0.0.1",), "eth0": ("10.1.0.5",)}, routes({}))
    assert (pick.address, pick.interface) == ("10.1.0.5", "eth0") and "only non-loopback" in pick.reason


def test_loopback_only_when_the_host_has_nothing_else():
    pick = choose_main({"lo": ("127.0.0.1",)}, routes({}))
    assert (pick.address, pick.interface) == ("127.0.0.1", "lo") and "every rank must run on this host" in pick.reason


def test_several_interfaces_and_no_route_is_an_error_naming_them_and_the_fix():
    with pytest.raises(NetAddrError, match=r"eth0 10\.1\.0\.5, ib0 192\.168\.7\.5.*set CUETRAIN_MAIN_HOST"):
        choose_main(FARM, routes({}))


def test_a_rank_uses_the_interface_that_routes_to_the_main_address():
    pick = choose_collective("192.168.7.9", FARM, routes({"192.168.7.9": "192.168.7.5"}))
    assert (pick.address, pick.interface) == ("192.168.7.5", "ib0")
    assert pick.reason == "it routes to the main address 192.168.7.9"


def test_rank_0_keeps_the_interface_holding_the_main_address_not_the_kernels_lo():
    # `ip route get` of an own address says "local 10.1.0.5 dev lo src 10.1.0.5": src is kept
    pick = choose_collective("10.1.0.5", FARM, routes({"10.1.0.5": "10.1.0.5"}))
    assert pick.interface == "eth0"


def test_a_host_name_that_resolves_to_loopback_is_the_debian_trap():
    route = routes({"render07": "127.0.1.1", netaddr.DEFAULT_ROUTE_PROBE: "10.1.0.5"})
    pick = choose_collective("render07", FARM, route)
    assert (pick.address, pick.interface) == ("10.1.0.5", "eth0")
    assert "resolves to loopback here (127.0.1.1" in pick.reason and "default route" in pick.reason


def test_a_literal_loopback_main_address_keeps_loopback():
    pick = choose_collective("127.0.0.1", FARM, routes({"127.0.0.1": "127.0.0.1"}))
    assert pick.interface == "lo"


def test_an_unroutable_main_address_is_an_error_saying_what_to_set():
    with pytest.raises(NetAddrError, match="no route to the main address COPYCAT_MAIN_ADDR=nowhere.*COPYCAT_LOCAL_ADDR"):
        choose_collective("nowhere", FARM, routes({}))


def test_the_real_kernel_route_and_interface_table_agree_on_loopback():
    assert netaddr.kernel_route("127.0.0.1") == "127.0.0.1"
    assert netaddr.interface_of("127.0.0.1", netaddr.interfaces())
    assert netaddr.kernel_route("no-such-host.invalid") is None
