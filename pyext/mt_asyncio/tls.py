"""Native TLS: BoringSSL in C++ beside the socket, on the parallel loop.

A ``TLSContext`` is an ``ssl.SSLContext``: everything set on it goes to the
ssl module as usual (so code that inspects it, or hands it to
``ssl.wrap_socket`` and friends, keeps working) and to a BoringSSL context
of the engine. Given as ``ssl=`` to ``create_connection``,
``create_server``, ``open_connection``, ``start_server`` and friends of the
parallel loop, its connections do their handshakes, encryption and
decryption in C++ on the connection's worker, with no Python call per
record, and the protocol is handed plaintext. Any other ``ssl.SSLContext``
keeps the ssl module's path (asyncio's sslproto over our transports).

A setting BoringSSL has no equivalent for raises ``ValueError`` (or
``NotImplementedError`` for a method) naming it; see docs/tls.md.

``install()`` makes every ``ssl.SSLContext(...)`` (and so
``ssl.create_default_context()``) a ``TLSContext``, for libraries that build
their own contexts (uvicorn's ``--ssl-*`` options, httpx); ``uninstall()``
takes that back.
"""

import os
import ssl as _ssl
import threading
import types
import weakref

from . import _core

__all__ = ["TLSContext", "TLSObject", "create_default_context", "install",
           "uninstall", "installed", "engine_version"]

_ENGINE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       "libmt_tls_engine.so")
_engine_version = None
_load_lock = threading.Lock()

# Engine error kinds (engine_api.h).
_ERR_SSL, _ERR_VERIFY, _ERR_EOF, _ERR_ZERO, _ERR_ARG, _ERR_NOT_FOUND = range(1, 7)

# OpenSSL 3's words for the verification failures BoringSSL reports
# (BoringSSL keeps OpenSSL 1.1's, which differ in places): the ssl
# module's verify_message.
_VERIFY_MESSAGES = {
    2: "unable to get issuer certificate",
    3: "unable to get certificate CRL",
    7: "certificate signature failure",
    9: "certificate is not yet valid",
    10: "certificate has expired",
    18: "self-signed certificate",
    19: "self-signed certificate in certificate chain",
    20: "unable to get local issuer certificate",
    21: "unable to verify the first certificate",
    23: "certificate revoked",
    24: "invalid CA certificate",
    26: "unsupported certificate purpose",
}
_HOSTNAME_MISMATCH = 62
_IP_MISMATCH = 64


def _make_error(kind, library, reason, message, verify_code, server_hostname):
    """The ssl module's exception for an engine error (called from C++)."""
    if kind == _ERR_ARG:
        return ValueError(message)
    if kind == _ERR_NOT_FOUND:
        return FileNotFoundError(message)
    if kind == _ERR_EOF:
        return _ssl.SSLEOFError(_ssl.SSL_ERROR_EOF,
                                "EOF occurred in violation of protocol")
    if kind == _ERR_ZERO:
        return _ssl.SSLZeroReturnError(_ssl.SSL_ERROR_ZERO_RETURN,
                                       "TLS/SSL connection has been closed (EOF)")
    if kind == _ERR_VERIFY:
        if verify_code == _HOSTNAME_MISMATCH:
            verify_message = (f"Hostname mismatch, certificate is not valid "
                              f"for {server_hostname!r}.")
        elif verify_code == _IP_MISMATCH:
            verify_message = (f"IP address mismatch, certificate is not "
                              f"valid for {server_hostname!r}.")
        else:
            verify_message = _VERIFY_MESSAGES.get(verify_code, message)
        exc = _ssl.SSLCertVerificationError(
            _ssl.SSL_ERROR_SSL,
            f"[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: "
            f"{verify_message} (BoringSSL)")
        exc.verify_code = verify_code
        exc.verify_message = verify_message
    else:
        prefix = f"[{library}: {reason}] " if library and reason else ""
        exc = _ssl.SSLError(_ssl.SSL_ERROR_SSL, f"{prefix}{message} (BoringSSL)")
    exc.library = library or None
    exc.reason = reason or None
    return exc


def _on_handshake(transport):
    """What a finished handshake adds to the transport's extra info, as
    sslproto's (peercert is decoded when first asked for), and the ALPN
    protocol chosen (None without one)."""
    ssl_object = transport.__dict__.pop("_mt_tls_object", None)
    if ssl_object is None:
        ssl_object = TLSObject(transport)
    return {
        "sslcontext": transport._tls_info("context"),
        "ssl_object": ssl_object,
        "cipher": transport._tls_info("cipher"),
        "compression": None,
        "alpn_protocol": transport._tls_info("alpn"),
    }


def engine_version():
    """The engine's BoringSSL version, loading the engine if needed."""
    global _engine_version
    if _engine_version is None:
        with _load_lock:
            if _engine_version is None:
                path = os.environ.get("MT_ASYNCIO_TLS_ENGINE", _ENGINE)
                _engine_version = _core._tls_load_engine(
                    path, _make_error, _on_handshake)
    return _engine_version


def _decode_der(der):
    """The ssl module's dict for a DER certificate, by OpenSSL's own
    decoder (which reads a file: an anonymous in-memory one)."""
    pem = _ssl.DER_cert_to_PEM_cert(der).encode("ascii")
    fd = os.memfd_create("mt_asyncio-peercert", os.MFD_CLOEXEC)
    try:
        os.write(fd, pem)
        return _ssl._ssl._test_decode_cert(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


class TLSObject(_ssl.SSLObject):
    """What ``get_extra_info('ssl_object')`` gives on the native engine: an
    ``ssl.SSLObject`` (isinstance() holds) answering the methods users
    call from the engine's connection. The engine drives the connection,
    so reading, writing, handshaking and unwrapping through it raise."""

    def __init__(self, transport):  # noqa: super().__init__ refuses on purpose.
        # Weakly: the transport's extra info holds this object, and a cycle
        # would leave every finished TLS connection to the cyclic collector.
        self._owner = weakref.ref(transport)
        self._context = transport._tls_info("context")

    @property
    def _transport(self):
        transport = self._owner()
        if transport is None:
            raise ValueError("the TLS connection is gone")
        return transport

    def _info(self, what, index=0):
        """What the connection's engine says, or None once it is gone."""
        transport = self._owner()
        return None if transport is None else transport._tls_info(what, index)

    def __repr__(self):
        return f"<mt_asyncio.tls.TLSObject of {self._owner()!r}>"

    @property
    def context(self):
        return self._context

    @context.setter
    def context(self, ctx):
        # The SNI callback choosing another certificate.
        if not isinstance(ctx, TLSContext):
            raise TypeError("the native TLS engine takes a mt_asyncio.tls.TLSContext")
        self._transport._tls_set_context(ctx._mt_core())
        self._context = ctx

    @property
    def server_side(self):
        return self._info("server_side")

    @property
    def server_hostname(self):
        return self._info("server_hostname")

    @property
    def session_reused(self):
        return bool(self._info("session_reused"))

    def _done(self):
        if not self._info("established"):
            raise ValueError("handshake not done yet")

    def getpeercert(self, binary_form=False):
        self._done()
        der = self._info("peer_cert", 0)
        if binary_form or der is None:
            return der
        if self._context.verify_mode == _ssl.CERT_NONE:
            return {}  # Not validated: the ssl module says nothing either.
        return _decode_der(der)

    def get_unverified_chain(self):
        self._done()
        chain = []
        while (der := self._info("peer_cert", _len(chain))) is not None:
            chain.append(der)
        return chain

    def get_verified_chain(self):
        if self._info("verify_result") != 0:
            return []
        return self.get_unverified_chain()

    def cipher(self):
        return self._info("cipher")

    def shared_ciphers(self):
        return self._info("shared_ciphers")

    def version(self):
        return self._info("version")

    def selected_alpn_protocol(self):
        return self._info("alpn")

    def selected_npn_protocol(self):
        return None

    def compression(self):
        return None

    def pending(self):
        return 0

    def get_channel_binding(self, cb_type="tls-unique"):
        if cb_type not in _ssl.CHANNEL_BINDING_TYPES:
            raise ValueError(f"{cb_type} channel binding type not implemented")
        return None  # Not offered by the engine (nor defined for TLS 1.3).

    @property
    def session(self):
        return None  # Sessions are cached per context, by server name.

    @session.setter
    def session(self, session):
        raise NotImplementedError(
            "mt_asyncio.tls: the engine resumes sessions from its context's "
            "cache (by server name); it takes no SSLSession")

    def _driven(self, *args, **kwargs):
        raise NotImplementedError(
            "mt_asyncio.tls: the native engine drives this connection; use "
            "the transport")

    read = write = do_handshake = unwrap = verify_client_post_handshake = _driven


class TLSBIOObject(TLSObject):
    """``TLSContext.wrap_bio()``'s object: the ``ssl.SSLObject`` interface
    over two ``ssl.MemoryBIO`` with BoringSSL doing the work. What code
    that runs TLS over its own streams uses (anyio's TLSStream, and so
    httpx; asyncio's sslproto for start_tls() over TLS): the records are
    BoringSSL's, moved between the BIOs and the engine by Python."""

    def __init__(self, bio, incoming, outgoing):
        super().__init__(bio)
        self._bio = bio  # Its own (the engine holds nothing of this object).
        self._incoming = incoming
        self._outgoing = outgoing
        _BIO_OWNERS[id(bio)] = self

    def _feed(self):
        data = self._incoming.read()
        if data:
            self._transport.feed(data)

    def _flush(self):
        data = self._transport.take()
        if data:
            self._outgoing.write(data)

    def _want_read(self):
        if self._incoming.eof:
            return _ssl.SSLEOFError(_ssl.SSL_ERROR_EOF,
                                    "EOF occurred in violation of protocol")
        return _ssl.SSLWantReadError(_ssl.SSL_ERROR_WANT_READ,
                                     "The operation did not complete (read)")

    def do_handshake(self):
        self._feed()
        try:
            done = self._transport.handshake()
        finally:
            self._flush()
        if not done:
            raise self._want_read()

    def read(self, len=1024, buffer=None):  # noqa: A002 - the ssl module's name.
        if buffer is not None:
            room = memoryview(buffer).nbytes
            if len <= 0 or len > room:
                len = room  # noqa: A001 - as the ssl module's read.
        self._feed()
        try:
            data, status = self._transport.read(len)
        finally:
            self._flush()
        if status == 1:
            raise self._want_read()
        if buffer is None:
            return data
        memoryview(buffer).cast("B")[:_len(data)] = data
        return _len(data)

    def write(self, data):
        self._feed()
        try:
            self._transport.write(data)
        finally:
            self._flush()
        return memoryview(data).nbytes

    def unwrap(self):
        self._feed()
        try:
            done = self._transport.shutdown()
        finally:
            self._flush()
        if not done:
            raise self._want_read()

    def verify_client_post_handshake(self):
        raise NotImplementedError("mt_asyncio.tls: no post-handshake authentication "
                                  "on the engine")


_len = len


# ssl.TLSVersion to wire versions (0: no bound).
_WIRE = {
    _ssl.TLSVersion.MINIMUM_SUPPORTED: 0,
    _ssl.TLSVersion.MAXIMUM_SUPPORTED: 0,
    _ssl.TLSVersion.TLSv1: 0x0301,
    _ssl.TLSVersion.TLSv1_1: 0x0302,
    _ssl.TLSVersion.TLSv1_2: 0x0303,
    _ssl.TLSVersion.TLSv1_3: 0x0304,
}
_NO_VERSION_OPTIONS = (
    (getattr(_ssl, "OP_NO_TLSv1", 0), 0x0301),
    (getattr(_ssl, "OP_NO_TLSv1_1", 0), 0x0302),
    (getattr(_ssl, "OP_NO_TLSv1_2", 0), 0x0303),
    (getattr(_ssl, "OP_NO_TLSv1_3", 0), 0x0304),
)
# OpenSSL's curve names for BoringSSL's.
_CURVES = {"prime256v1": "P-256", "secp256r1": "P-256", "secp384r1": "P-384",
           "secp521r1": "P-521", "x25519": "X25519", "X25519": "X25519",
           "P-256": "P-256", "P-384": "P-384", "P-521": "P-521"}
# Options that change behaviour and that BoringSSL cannot give.
_OPTIONS_WITHOUT_EQUIVALENT = {
    getattr(_ssl, "OP_ENABLE_KTLS", 0): "OP_ENABLE_KTLS",
    getattr(_ssl, "OP_ENABLE_MIDDLEBOX_COMPAT", 0): None,  # BoringSSL always is.
}


def _unsupported(setting, why="BoringSSL has no equivalent"):
    return ValueError(f"mt_asyncio.tls: {setting}: {why}")


class TLSContext(_ssl.SSLContext):
    """An ``ssl.SSLContext`` whose connections on mt_asyncio's loop run on
    the native BoringSSL engine."""

    def __new__(cls, protocol=None, *args, **kwargs):
        engine_version()
        if protocol is not None and protocol not in (
                _ssl.PROTOCOL_TLS, _ssl.PROTOCOL_TLS_CLIENT, _ssl.PROTOCOL_TLS_SERVER):
            raise _unsupported(f"protocol {protocol!r}",
                               "only PROTOCOL_TLS, PROTOCOL_TLS_CLIENT and "
                               "PROTOCOL_TLS_SERVER")
        self = _base_new(cls, protocol, *args, **kwargs)
        self._mt_lock = threading.Lock()
        self._mt_live = _core.TLSContextCore()
        self._mt_built = -1       # The generation _mt_live last took.
        self._mt_generation = 0   # Bumped by every property set.
        self._mt_sni = None
        # Defaults the ssl module gives from the environment.
        keylog = getattr(self, "keylog_filename", None)
        if keylog:
            self._mt_live.set_keylog(keylog)
        return self

    # --- what the loop asks -----------------------------------------------

    def _mt_core(self):
        """The engine context with every setting applied."""
        with self._mt_lock:
            if self._mt_built != self._mt_generation:
                self._mt_apply(self._mt_live)
                self._mt_built = self._mt_generation
            return self._mt_live

    def _mt_spec(self, server_side, server_hostname, handshake_timeout,
                 shutdown_timeout):
        """What the transports take: see tls_session.h."""
        # The ssl module's refusals of a context made for the other side.
        if server_side and self.protocol == _ssl.PROTOCOL_TLS_CLIENT:
            raise ValueError("Cannot create a server socket with a "
                             "PROTOCOL_TLS_CLIENT context")
        if not server_side and self.protocol == _ssl.PROTOCOL_TLS_SERVER:
            raise ValueError("Cannot create a client socket with a "
                             "PROTOCOL_TLS_SERVER context")
        return (self, self._mt_core(), bool(server_side), server_hostname or None,
                60.0 if handshake_timeout is None else float(handshake_timeout),
                30.0 if shutdown_timeout is None else float(shutdown_timeout))

    def _mt_apply(self, core):
        core.set_verify(int(self.verify_mode), bool(self.check_hostname))
        core.set_verify_flags(int(self.verify_flags))
        options = int(self.options)
        lo = _WIRE[self.minimum_version] or 0x0301
        hi = _WIRE[self.maximum_version] or 0x0304
        allowed = [v for flag, v in _NO_VERSION_OPTIONS
                   if lo <= v <= hi and not (flag and options & flag)]
        if not allowed:
            raise _unsupported("minimum_version/maximum_version/options",
                               "no TLS version is left enabled")
        core.set_versions(allowed[0], allowed[-1])
        core.set_flags(not options & _ssl.OP_NO_TICKET,
                       bool(self.hostname_checks_common_name),
                       bool(options & _ssl.OP_CIPHER_SERVER_PREFERENCE))

    def _mt_changed(self):
        with self._mt_lock:
            self._mt_generation += 1

    # --- methods: the ssl module's first, then the engine's ---------------

    def load_cert_chain(self, certfile, keyfile=None, password=None):
        if callable(password):
            given = password()  # Asked once; both libraries get the answer.
            password = given
        super().load_cert_chain(certfile, keyfile, password)
        with open(certfile, "rb") as f:
            chain = f.read()
        if keyfile is None:
            key = chain
        else:
            with open(keyfile, "rb") as f:
                key = f.read()
        if isinstance(password, str):
            password = password.encode("utf-8")
        elif isinstance(password, bytearray):
            password = bytes(password)
        self._mt_live.use_cert_chain(chain, key, password)

    def load_verify_locations(self, cafile=None, capath=None, cadata=None):
        super().load_verify_locations(cafile, capath, cadata)
        if cafile is not None:
            with open(cafile, "rb") as f:
                self._mt_live.add_trust_pem(f.read())
        if capath is not None:
            self._mt_live.add_trust_dir(os.fsdecode(capath))
        if cadata is not None:
            if isinstance(cadata, str):
                self._mt_live.add_trust_pem(cadata.encode("ascii"))
            else:
                self._mt_live.add_trust_der(bytes(cadata))

    def set_default_verify_paths(self):
        super().set_default_verify_paths()
        # OpenSSL's places (and its SSL_CERT_FILE/SSL_CERT_DIR), so both
        # libraries trust the same roots.
        paths = _ssl.get_default_verify_paths()
        cafile = os.environ.get(paths.openssl_cafile_env) or paths.cafile
        capath = os.environ.get(paths.openssl_capath_env) or paths.capath
        if cafile and os.path.isfile(cafile):
            with open(cafile, "rb") as f:
                try:
                    self._mt_live.add_trust_pem(f.read())
                except _ssl.SSLError:
                    pass  # An empty bundle: nothing to trust, as OpenSSL.
        if capath and os.path.isdir(capath):
            self._mt_live.add_trust_dir(capath)

    def set_alpn_protocols(self, alpn_protocols):
        super().set_alpn_protocols(alpn_protocols)
        wire = bytearray()
        for name in alpn_protocols:
            raw = name.encode("ascii")
            wire.append(len(raw))
            wire += raw
        self._mt_live.set_alpn(bytes(wire))

    def set_ciphers(self, cipherlist):
        super().set_ciphers(cipherlist)
        # Security levels are OpenSSL's; BoringSSL's fixed policy has none.
        spec = ":".join(part for part in cipherlist.split(":")
                        if not part.startswith("@SECLEVEL="))
        try:
            self._mt_live.set_ciphers(spec)
        except _ssl.SSLError as exc:
            raise _unsupported(f"set_ciphers({cipherlist!r})",
                               f"BoringSSL does not take this cipher list ({exc})") from None

    def set_ecdh_curve(self, name):
        super().set_ecdh_curve(name)
        curve = _CURVES.get(name)
        if curve is None:
            raise _unsupported(f"set_ecdh_curve({name!r})")
        self._mt_live.set_curves(curve)

    def wrap_bio(self, incoming, outgoing, server_side=False,
                 server_hostname=None, session=None):
        """An SSLObject over the two BIOs, on BoringSSL (TLSBIOObject)."""
        if session is not None:
            raise NotImplementedError(
                "mt_asyncio.tls: wrap_bio(session=...): the engine resumes "
                "from its context's cache, by server name")
        if server_side and server_hostname:
            raise ValueError("server_hostname can only be specified in client mode")
        if not server_side and self.check_hostname and not server_hostname:
            raise ValueError("check_hostname requires server_hostname")
        if server_hostname is not None and not isinstance(server_hostname, str):
            server_hostname = str(server_hostname, "ascii")
        bio = _core.TLSBio(self._mt_spec(server_side, server_hostname, None, None))
        return TLSBIOObject(bio, incoming, outgoing)

    def load_dh_params(self, path):
        raise NotImplementedError(
            "mt_asyncio.tls: load_dh_params: BoringSSL has no finite-field "
            "Diffie-Hellman (ECDHE only)")

    def set_npn_protocols(self, npn_protocols):
        raise NotImplementedError("mt_asyncio.tls: set_npn_protocols: "
                                  "BoringSSL has no NPN here; use ALPN")

    def set_psk_client_callback(self, callback):
        raise NotImplementedError("mt_asyncio.tls: set_psk_client_callback: "
                                  "no external PSKs on the engine")

    def set_psk_server_callback(self, callback, identity_hint=None):
        raise NotImplementedError("mt_asyncio.tls: set_psk_server_callback: "
                                  "no external PSKs on the engine")

    # --- properties: the ssl module's, then a rebuild ---------------------

    def _property(name, check=None):  # noqa: N805 - a class-body helper.
        base = getattr(_ssl.SSLContext, name)

        def setter(self, value):
            if check is not None:
                check(value)
            base.__set__(self, value)
            self._mt_changed()

        return property(base.__get__, setter, doc=base.__doc__)

    def _check_version(value):  # noqa: N805
        if value == _ssl.TLSVersion.SSLv3:
            raise _unsupported("TLSVersion.SSLv3", "BoringSSL has no SSLv3")

    def _check_options(value):  # noqa: N805
        for flag, name in _OPTIONS_WITHOUT_EQUIVALENT.items():
            if flag and name and value & flag:
                raise _unsupported(f"options |= {name}")

    verify_mode = _property("verify_mode")
    check_hostname = _property("check_hostname")
    verify_flags = _property("verify_flags")
    minimum_version = _property("minimum_version", _check_version)
    maximum_version = _property("maximum_version", _check_version)
    options = _property("options", _check_options)
    hostname_checks_common_name = _property("hostname_checks_common_name")
    del _property, _check_version, _check_options

    @property
    def keylog_filename(self):
        return _ssl.SSLContext.keylog_filename.__get__(self)

    @keylog_filename.setter
    def keylog_filename(self, path):
        _ssl.SSLContext.keylog_filename.__set__(self, path)
        self._mt_live.set_keylog(None if path is None else os.fspath(path))

    @property
    def sni_callback(self):
        return self._mt_sni

    @sni_callback.setter
    def sni_callback(self, callback):
        if callback is not None and not callable(callback):
            raise TypeError("not a callable object")
        # The ssl module keeps it too (for its own sockets).
        _ssl.SSLContext.sni_callback.__set__(self, callback)
        self._mt_sni = callback
        self._mt_live.set_sni(None if callback is None else self._mt_server_name)

    def _mt_server_name(self, owner, server_name):
        """The engine's SNI hook (during the handshake, on the connection's
        worker): the ssl module's sni_callback(ssl_object, name, context).
        `owner` is the transport, or a wrap_bio() object's engine."""
        callback = self._mt_sni
        if callback is None:
            return None
        if isinstance(owner, _core.TLSBio):
            ssl_object = _BIO_OWNERS.get(id(owner)) or TLSObject(owner)
        else:
            ssl_object = TLSObject(owner)
            owner.__dict__["_mt_tls_object"] = ssl_object  # The extra's, later.
        return callback(ssl_object, server_name, self)


_base_new = _ssl.SSLContext.__new__
# A wrap_bio() engine's SSLObject, by the engine's id, for its SNI
# callback; weak, so the object (which owns the engine) is not kept.
_BIO_OWNERS = weakref.WeakValueDictionary()


def _with_tls_context(function):
    """The ssl module's `function` itself, its code run with TLSContext as
    the class it names SSLContext: its defaults, checks and environment
    (SSLKEYLOGFILE) exactly, and no global patched meanwhile (another
    thread making an ssl.SSLContext at that moment gets the ssl module's)."""
    scope = dict(vars(_ssl), SSLContext=TLSContext)
    made = types.FunctionType(function.__code__, scope, function.__name__,
                              function.__defaults__, function.__closure__)
    made.__kwdefaults__ = function.__kwdefaults__
    made.__doc__ = f"ssl.{function.__name__}(), made of a TLSContext."
    return made


create_default_context = _with_tls_context(_ssl.create_default_context)


# --- install(): ssl.SSLContext(...) makes TLSContext ----------------------

_install_lock = threading.Lock()
_install_count = 0


def _patched_new(cls, protocol=None, *args, **kwargs):
    if cls is _ssl.SSLContext:
        cls = TLSContext
        return TLSContext.__new__(cls, protocol, *args, **kwargs)
    return _base_new(cls, protocol, *args, **kwargs)


def install():
    """From now on ``ssl.SSLContext(...)`` — and so
    ``ssl.create_default_context()`` and every library that makes its own
    context — makes a ``TLSContext``. Reversible (``uninstall()``);
    contexts made before keep their class. isinstance() checks against
    ``ssl.SSLContext`` hold for both."""
    global _install_count
    with _install_lock:
        _install_count += 1
        if _install_count == 1:
            engine_version()
            _ssl.SSLContext.__new__ = staticmethod(_patched_new)


def uninstall():
    """Takes back one install(): ssl.SSLContext(...) is the ssl module's
    own again once every install() is taken back."""
    global _install_count
    with _install_lock:
        if _install_count == 0:
            return
        _install_count -= 1
        if _install_count == 0:
            _ssl.SSLContext.__new__ = staticmethod(_base_new)


def installed():
    return _install_count > 0

