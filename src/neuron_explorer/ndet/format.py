"""The import path docs/ndet.md gave in 0.1.0 for reading an NDET log: an alias of
``contracts.ndet_log``, where the format lives since it became a contract of its own
(docs/decisions/0100-layers-named-by-the-tree.md).  Nothing in the package imports it."""

from neuron_explorer.contracts.ndet_log import (  # noqa: F401
    CC_KINDS,
    FORMAT_NAME,
    FORMAT_VERSION,
    KIND_CC_BARRIER,
    KIND_CC_OP,
    KIND_EXEC,
    KIND_NUMERICAL_ERROR,
    RECORD_DTYPE,
    ROLE_CHILD,
    ROLE_MAIN,
    ROLE_RANK,
    STATE_COMPLETE,
    STATE_IN_FLIGHT,
    LogFormatError,
    NdetLog,
    read_header,
    read_log,
    sniff,
)
