import os

import pytest

from testbed import Testbed, TestbedUnavailable, binary


@pytest.fixture
def make_testbed():
    """Builds testbeds that are torn down after the test, whatever happens."""
    made = []

    def make(hosts, rails=(), planes=(), **sites):
        try:
            tb = Testbed(binary("deltacast-testbed"), hosts, rails, planes, **sites)
        except TestbedUnavailable as e:
            pytest.skip(str(e))
        made.append(tb)
        return tb

    yield make
    for tb in made:
        tb.close()


def pytest_configure(config):
    if os.geteuid() != 0:
        config.addinivalue_line("markers", "netns: needs root to build network namespaces")
