"""End-to-end fixtures: the integration tests' controller process."""

from tests.integration.conftest import controller

__all__ = ["controller"]
