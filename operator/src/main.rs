//! `zlink-operator`: see [`zlink_operator::cli`].

fn main() -> std::process::ExitCode {
    zlink_operator::cli::main()
}
