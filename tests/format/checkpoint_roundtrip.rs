//! Property test: random checkpoints written by the `safetensors` crate read
//! back with the same names, dtypes, shapes and offsets.

use proptest::prelude::*;
use safetensors::tensor::{Dtype as StDtype, SafeTensors, TensorView};
use weightscope::checkpoint::Checkpoint;

const DTYPES: [StDtype; 12] = [
    StDtype::BOOL,
    StDtype::U8,
    StDtype::I8,
    StDtype::F8_E4M3,
    StDtype::I16,
    StDtype::F16,
    StDtype::BF16,
    StDtype::I32,
    StDtype::U32,
    StDtype::F32,
    StDtype::F64,
    StDtype::U64,
];

fn tensor_strategy() -> impl Strategy<Value = (StDtype, Vec<usize>)> {
    (0..DTYPES.len(), prop::collection::vec(0usize..5, 0..4))
        .prop_map(|(d, shape)| (DTYPES[d], shape))
}

fn name_strategy() -> impl Strategy<Value = String> {
    // Dots, digits and non-ASCII, as real names have.
    "[a-z]{1,6}(\\.[0-9]{1,2})?(\\.[a-zé_]{1,8}){0,3}"
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn written_checkpoints_read_back_identically(
        tensors in prop::collection::btree_map(name_strategy(), tensor_strategy(), 0..12),
        metadata in prop::collection::hash_map("[a-z]{1,5}", "[ -~]{0,12}", 0..3),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("model.safetensors");
        let buffers: Vec<(String, StDtype, Vec<usize>, Vec<u8>)> = tensors
            .iter()
            .map(|(name, (dtype, shape))| {
                let bytes = shape.iter().product::<usize>() * dtype.bitsize() / 8;
                let data = (0..bytes).map(|i| u8::try_from(i * 7 % 251).unwrap_or_default()).collect();
                (name.clone(), *dtype, shape.clone(), data)
            })
            .collect();
        let views: Vec<(String, TensorView<'_>)> = buffers
            .iter()
            .map(|(name, dtype, shape, data)| {
                (name.clone(), TensorView::new(*dtype, shape.clone(), data).expect("view"))
            })
            .collect();
        let metadata = if metadata.is_empty() { None } else { Some(metadata) };
        safetensors::serialize_to_file(views, metadata.clone(), &path).expect("write");

        let checkpoint = Checkpoint::open(&path).expect("open");
        prop_assert!(checkpoint.problems().is_empty(), "{:?}", checkpoint.problems());
        let bytes = std::fs::read(&path).expect("read");
        let (_, theirs) = SafeTensors::read_metadata(&bytes).expect("the crate reads it");
        prop_assert_eq!(checkpoint.tensors().len(), tensors.len());
        for ours in checkpoint.tensors() {
            let info = theirs.info(ours.name()).expect("same names");
            prop_assert_eq!(ours.dtype().name(), format!("{:?}", info.dtype));
            let shape: Vec<u64> = info.shape.iter().map(|&d| d as u64).collect();
            prop_assert_eq!(ours.shape(), &shape[..]);
            prop_assert_eq!(ours.data_offsets(), (info.data_offsets.0 as u64, info.data_offsets.1 as u64));
        }
        prop_assert_eq!(checkpoint.metadata(), metadata.unwrap_or_default().into_iter().collect());
    }
}
