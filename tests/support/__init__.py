"""Test support: factories, the controller process, API helpers, the TF harness.

Plain modules the tests import; fixtures live only in the ``conftest.py`` files.
Nothing here is a test, and no test module imports another test module.
"""
