"""Names of DRA drivers other than carve's, for tests that a claim's entries of another driver are left alone:
one that sorts before `gpu.carve.dev`, one that is a prefix of it (also before), one that sorts after, so an
ordering comparison written for equality is caught whichever way it leans."""

OTHER_DRIVERS = ("dra.example.com", "gpu.carve.de", "net.example.com")
