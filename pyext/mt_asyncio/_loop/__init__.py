"""The loop's parts that are not asyncio-shaped modules: the mixins that
base_events.EventLoop is assembled from (connections, sockets, sendfile,
pipes, child processes, signal handlers) and what they are built on (the
Server, the TLS protocol). Private: reached through the loop's methods."""
