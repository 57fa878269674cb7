//! The library answers to the driver's soname, as `dlopen("libcuda.so.1")`
//! expects (xtask copies it to target/simcuda/libcuda.so.1).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
}
