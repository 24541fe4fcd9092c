"""What the integration tests share: real servers and worker processes, the flows they run, receivers
and probes. Test files import from here, never from each other."""
