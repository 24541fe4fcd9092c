"""Which shipped code a worker runs: ``FLUKSIO_ACCEPT_CODE`` (``fluksio worker --accept-code``).

A call whose code this worker registered (``FLUKSIO_FLOWS``) runs as it always did; this module is asked
only about a call that came with a code package the worker does not hold (``NodeCall.code_entry``). Running
it means importing code that arrived through the broker, so the default refuses it:

* ``registered``: only the flows ``FLUKSIO_FLOWS`` loads run here;
* ``signed``: also packages signed by a certificate ``FLUKSIO_SIGNING_CERT_STORE`` trusts (the submitter signs
  the digest: :meth:`~fluksio.security.signatures.Signer.sign_code`), so writing to Redis is not enough;
* ``any``: any package: whoever can write your Redis can run code here.

Each refusal is one line for the node's error, saying what to change on which machine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fluksio.errors import ConfigError, MessageRefused
from fluksio.flows.source import short

if TYPE_CHECKING:
    from fluksio.messages import NodeCall
    from fluksio.security.signatures import Signer
    from fluksio.settings import Settings

#: The setting, as the environment and the worker's flag name it.
SETTING = "FLUKSIO_ACCEPT_CODE"
FLAG = "--accept-code"
#: What a submitter sets to sign its packages.
SIGNING_SETTINGS = "FLUKSIO_SIGNING_KEY, FLUKSIO_SIGNING_CERTIFICATE and FLUKSIO_SIGNING_CERT_STORE"


def require_code_trust(settings: Settings) -> None:
    """As a worker starts: ``signed`` needs certificates to check signatures against (a
    :class:`~fluksio.errors.ConfigError` saying what to set, rather than a worker refusing every package)."""
    if settings.accept_code == "signed" and not settings.signing:
        raise ConfigError(f"{SETTING}=signed runs code packages signed by a certificate this worker trusts, and it "
                          f"has none to check with: set {SIGNING_SETTINGS} (the store holding the certificates of "
                          f"those who submit), or run only registered flows ({FLAG} registered)")


def code_refusal(settings: Settings, signer: Signer | None, call: NodeCall) -> str | None:
    """Why this worker must not run the code package ``call`` came with (one line), or ``None``: it may.

    ``signer``: this process's certificates (``None`` without the signing settings). Asked only for a call
    whose code this worker does not hold: a registered one never comes here.
    """
    mode = settings.accept_code
    if mode == "any":
        return None
    machine = call.grant.machine
    came = f"flow {call.flow!r} of run {call.run_id} came with code package {short(call.code_digest)}"
    if mode == "registered":
        return (f"machine {machine} runs only the flows FLUKSIO_FLOWS loads ({SETTING}=registered), and {came}, "
                f"which it does not hold; set {SETTING}=signed (or any) on {machine} (`fluksio worker {FLAG} "
                f"signed`) to run shipped code, or restart it on the same code")
    rule = f"machine {machine} runs shipped code only when signed by a certificate it trusts ({SETTING}=signed)"
    if signer is None:  # a worker checks this as it starts (require_code_trust); a process that did not may not
        return (f"{rule}, and {came}, whose signature it cannot check without certificates: set {SIGNING_SETTINGS} "
                f"on {machine}")
    if call.code_signature is None:
        return (f"{rule}, and {came}, unsigned; the submitter signs it when it has {SIGNING_SETTINGS} set (with a "
                f"certificate in {signer.store_path} on {machine}), or set {SETTING}=any on {machine}")
    try:
        signer.verify_code(call.code_digest or "", call.code_entry or "", call.code_signature)
    except MessageRefused as exc:
        return f"{rule}, and {came}, {exc}"
    return None
