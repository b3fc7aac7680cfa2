"""mpdp: multiparty differential privacy. This package is the network-free protocol core."""
__version__ = "0.1.0"
