//! Compiles the HostAdmin proto (`protocol/admin/proto/zlink/admin/v1/host_admin.proto`) with the
//! vendored protoc from `protoc-bin-vendored`, so the build needs no system protoc.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let proto_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("proto");
    let proto = proto_dir.join("zlink/admin/v1/host_admin.proto");
    println!("cargo:rerun-if-changed={}", proto.display());
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc);
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_with_config(config, &[proto], &[proto_dir])?;
    Ok(())
}
