/* edit_h5_attr FILE ATTRIBUTE VALUE: overwrite a scalar attribute of the
 * root group of an HDF5 file in place, as a user with h5py would: an
 * integer attribute takes VALUE as an integer, a string attribute the text.
 * For the tests of the checkpoint metadata checksum (tests/system/test_inputs.sh);
 * needs nothing but the HDF5 library the project links already. */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: edit_h5_attr FILE ATTRIBUTE VALUE\n");
        return 2;
    }
    hid_t file = H5Fopen(argv[1], H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t attr = file >= 0 ? H5Aopen(file, argv[2], H5P_DEFAULT) : -1;
    if (attr < 0) {
        fprintf(stderr, "edit_h5_attr: %s: no attribute %s\n", argv[1], argv[2]);
        return 1;
    }
    hid_t type = H5Aget_type(attr);
    herr_t e = -1;
    if (H5Tget_class(type) == H5T_INTEGER) {
        long long value = strtoll(argv[3], NULL, 10);
        e = H5Awrite(attr, H5T_NATIVE_LLONG, &value);
    } else if (H5Tget_class(type) == H5T_STRING && H5Tget_size(type) > strlen(argv[3])) {
        char *text = calloc(H5Tget_size(type), 1);   /* the stored size, NUL-padded */
        if (text) {
            memcpy(text, argv[3], strlen(argv[3]));
            e = H5Awrite(attr, type, text);
        }
        free(text);
    }
    H5Tclose(type);
    H5Aclose(attr);
    if (H5Fclose(file) < 0 || e < 0) {
        fprintf(stderr, "edit_h5_attr: %s: cannot write %s = %s\n", argv[1], argv[2], argv[3]);
        return 1;
    }
    return 0;
}
