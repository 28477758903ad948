"""``ring-launch``'s exit codes: the documented table, in one place.

Plain assignments on purpose: :mod:`ranktable.launch.pyzmain` imports this module
before it knows whether the Python running it is new enough (it must parse
on any Python 3), so no annotations, f-strings or newer syntax.
A launcher that started CMD exits with CMD's own code instead (128+N for
signal N).
"""

ERROR = 1
USAGE = 2
NOT_IN_SPEC = 3
RESTARTS_SPENT = 4
EXEC_LIMIT = 7
MALFORMED = 65
DAMAGED = 66
OLD_PYTHON = 69
API_DENIED = 77
API_CONFIG = 78
TIMEOUT = 124
NOT_EXECUTABLE = 126
NOT_FOUND = 127

#: code -> meaning, as ``ring-launch --help`` and docs/launcher.md list them.
TABLE = {
    ERROR: "API or I/O error not listed below",
    USAGE: "usage error",
    NOT_IN_SPEC: "this pod is not in the completed spec",
    RESTARTS_SPENT: "--max-restarts spent (--supervise)",
    EXEC_LIMIT: "CMD's environment over the exec limit (E2BIG)",
    MALFORMED: "malformed spec",
    DAMAGED: "the launcher file (.pyz) is damaged or incomplete",
    OLD_PYTHON: "Python older than 3.9",
    API_DENIED: "the API server refused (401/403): the Role is missing",
    API_CONFIG: "no usable API configuration: token file, CA bundle, kubeconfig, a server certificate that fails",
    TIMEOUT: "timeout",
    NOT_EXECUTABLE: "CMD not executable",
    NOT_FOUND: "CMD not found",
}
