//! `lens`: `lens trace-view DIR` and `lens analyze DIR` on a lens `file`
//! export, and `lens control FILE` on a running job's control file (see the library's documentation and docs/trace-view.md).

use clap::Parser as _;

fn main() -> std::process::ExitCode {
    lens_command::run(&lens_command::Cli::parse())
}
