"""The DCA client library: fetch a job, encode, secret-share and submit a vector (parties, loadgen, mpdp dca submit)."""
