//! The C functions' own checks: codes, texts, never unwinding.

use std::ffi::{CStr, CString};

use barriers::{Dtype, Op};

use super::guarded;
use crate::collective::reduction;
use crate::*;
#[test]
fn the_c_constants_are_the_wire_codes_and_others_are_refused() {
    let dtypes = [MCD_INT32, MCD_INT64, MCD_UINT32, MCD_UINT64, MCD_FLOAT, MCD_DOUBLE];
    for (c, d) in dtypes.into_iter().zip(Dtype::ALL) {
        assert_eq!(reduction(c, MCD_SUM).unwrap(), (d, Op::Sum));
    }
    let ops = [MCD_SUM, MCD_MIN, MCD_MAX, MCD_PROD, MCD_BAND, MCD_BOR, MCD_BXOR];
    for (c, o) in ops.into_iter().zip(Op::ALL) {
        assert_eq!(reduction(MCD_UINT64, c).unwrap(), (Dtype::U64, o));
    }
    assert!(reduction(mcd_dtype(0), MCD_SUM).unwrap_err().message.contains("not an mcd_dtype"));
    assert!(reduction(MCD_INT32, mcd_op(99)).unwrap_err().message.contains("not an mcd_op"));
    assert!(reduction(MCD_DOUBLE, MCD_BAND).unwrap_err().message.contains("integers only"));
    // SAFETY: NULL handles are caught.
    let code = unsafe { mcd_allreduce(std::ptr::null_mut(), std::ptr::null(), std::ptr::null_mut(), 1, MCD_INT32, MCD_SUM) };
    assert_eq!(code, MCD_ERR_ARGUMENT);
}

#[test]
fn a_secret_left_all_zeros_is_refused() {
    // Review of issue 27: `mcd_params_default` leaves `secret` zeroed; a
    // caller who sets MCD_AUTH_KEY and forgets to fill it would run
    // every job under the one key every attacker can guess.
    // SAFETY: a valid, defaulted mcd_params.
    unsafe {
        let mut params = std::mem::zeroed::<mcd_params>();
        mcd_params_default(&mut params);
        params.rank = 0;
        params.size = 2;
        params.auth = MCD_AUTH_KEY;
        let interfaces = CString::new("mcd-no-such0").unwrap();
        params.interfaces = interfaces.as_ptr();
        let mut job = std::ptr::null_mut();
        assert_eq!(mcd_init(&params, &mut job), MCD_ERR_CONFIG);
        assert!(job.is_null());
        let err = CStr::from_ptr(mcd_last_error()).to_str().unwrap().to_string();
        assert!(err.contains("all zeros") && err.contains("mcd_secret_generate"), "{err}");
    }
}

#[test]
fn errors_are_codes_with_text_never_unwinding() {
    // SAFETY: NULL handles and pointers are what is being tested.
    unsafe {
        assert_eq!(mcd_barrier(std::ptr::null_mut()), MCD_ERR_ARGUMENT);
        assert!(CStr::from_ptr(mcd_last_error()).to_str().unwrap().contains("NULL"));
        assert_eq!(mcd_init(std::ptr::null(), std::ptr::null_mut()), MCD_ERR_ARGUMENT);
        let mut params = std::mem::zeroed::<mcd_params>();
        mcd_params_default(&mut params);
        params.rank = 3;
        params.size = -1;
        let mut job = std::ptr::null_mut();
        assert_eq!(mcd_init(&params, &mut job), MCD_ERR_CONFIG);
        assert!(job.is_null());
        assert!(CStr::from_ptr(mcd_last_error()).to_str().unwrap().contains("give both"));
        assert_eq!(mcd_finalize(std::ptr::null_mut()), MCD_OK);
    }
    // SAFETY: as above; `secret` has MCD_SECRET_LEN bytes.
    unsafe {
        let mut params = std::mem::zeroed::<mcd_params>();
        mcd_params_default(&mut params);
        assert_eq!((params.auth, params.secret), (MCD_AUTH_ENV, [0; MCD_SECRET_LEN]));
        params.rank = 0;
        params.size = 2;
        params.auth = 7;
        let mut job = std::ptr::null_mut();
        assert_eq!(mcd_init(&params, &mut job), MCD_ERR_CONFIG);
        assert!(CStr::from_ptr(mcd_last_error()).to_str().unwrap().contains("auth 7 is none of MCD_AUTH_ENV"));
        let (mut a, mut b) = ([0u8; MCD_SECRET_LEN], [0u8; MCD_SECRET_LEN]);
        assert_eq!((mcd_secret_generate(a.as_mut_ptr()), mcd_secret_generate(b.as_mut_ptr())), (MCD_OK, MCD_OK));
        assert_ne!(a, b, "fresh secrets differ");
        assert_eq!(mcd_secret_generate(std::ptr::null_mut()), MCD_ERR_ARGUMENT);
    }
    let panicked = guarded(|| panic!("boom"));
    assert_eq!(panicked, MCD_ERR_INTERNAL);
    // SAFETY: mcd_last_error returns a valid C string.
    assert!(unsafe { CStr::from_ptr(mcd_last_error()) }.to_str().unwrap().contains("boom"));
    for code in [MCD_OK, MCD_ERR_PERMISSION, -99] {
        // SAFETY: mcd_strerror returns static C strings.
        assert!(!unsafe { CStr::from_ptr(mcd_strerror(code)) }.to_bytes().is_empty());
    }
}
