//! Unit tests of `tapir` beyond those beside the code.
